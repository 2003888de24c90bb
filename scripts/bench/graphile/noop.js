// The peer of cobro's throughput benchmark: how fast graphile-worker drains
// N no-op jobs on this machine's PostgreSQL, with its default settings except
// concurrency 10.
//
// Jobs are added in bulk before the timer starts (WorkerUtils.addJobs, which
// calls graphile_worker.add_jobs with up to 5000 specs per call). The timer
// runs from just before `run()` (connect, LISTEN, first fetch included) to
// the N-th `job:success` event. Also reported: the CPU this process used
// while draining, and the CPU (clock ticks, from /proc) of the PostgreSQL
// backends serving it. Prints one line: `RESULT {json}`.
//
// Usage: DATABASE_URL=postgres://... node noop.js <jobs>
"use strict";
const fs = require("fs");
const { run, makeWorkerUtils } = require("graphile-worker");

// CPU clock ticks (user + system) used so far by the other backends of this
// database, read from /proc (Linux, same machine; 0 elsewhere).
async function backendTicks(utils) {
  return utils.withPgClient(async (client) => {
    const { rows } = await client.query(
      "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
    );
    let ticks = 0;
    for (const { pid } of rows) {
      try {
        const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
        const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
        ticks += Number(fields[11]) + Number(fields[12]);
      } catch (_) {
        // gone already, or not Linux
      }
    }
    return ticks;
  });
}

function graphileVersion() {
  const path = require("path");
  const main = require.resolve("graphile-worker");
  const pkg = path.join(path.dirname(main), "..", "package.json");
  return JSON.parse(fs.readFileSync(pkg, "utf8")).version;
}

async function main() {
  const connectionString = process.env.DATABASE_URL;
  const jobs = Number(process.argv[2] || "1000");
  if (!connectionString || !(jobs > 0)) {
    throw new Error("usage: DATABASE_URL=... node noop.js <jobs>");
  }
  const utils = await makeWorkerUtils({ connectionString });
  await utils.migrate();
  const chunk = 5000;
  for (let i = 0; i < jobs; i += chunk) {
    const specs = [];
    for (let j = i; j < Math.min(jobs, i + chunk); j++) {
      specs.push({ identifier: "noop", payload: { i: j } });
    }
    await utils.addJobs(specs);
  }

  let done = 0;
  let finished;
  const allDone = new Promise((resolve) => (finished = resolve));
  const t0 = process.hrtime.bigint();
  const cpu0 = process.cpuUsage();
  const runner = await run({
    connectionString,
    concurrency: 10,
    noHandleSignals: true,
    taskList: { noop: async () => {} },
  });
  runner.events.on("job:success", () => {
    done += 1;
    if (done === jobs) finished(process.hrtime.bigint());
  });
  const t1 = await allDone;
  const cpu = process.cpuUsage(cpu0);
  const pgTicks = await backendTicks(utils);
  await runner.stop();
  await utils.release();
  const secs = Number(t1 - t0) / 1e9;
  const out = {
    peer: "graphile-worker",
    version: graphileVersion(),
    node: process.version,
    jobs,
    concurrency: 10,
    secs: Number(secs.toFixed(3)),
    jobs_per_s: Math.round(jobs / secs),
    self_cpu_us_per_job: Math.round((cpu.user + cpu.system) / jobs),
    pg_backend_ticks: pgTicks,
  };
  // graphile-worker logs every job on stdout; the result line is marked.
  process.stdout.write("RESULT " + JSON.stringify(out) + "\n");
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
