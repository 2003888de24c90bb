// The peer of cobro's throughput benchmark: how fast graphile-worker drains
// N no-op jobs on this machine's PostgreSQL, with its default settings except
// concurrency 10.
//
// Jobs are added in bulk before the timer starts (WorkerUtils.addJobs, which
// calls graphile_worker.add_jobs with up to 5000 specs per call). The timer
// runs from just before `run()` (connect, LISTEN, first fetch included) to
// the N-th `job:success` event. Prints one line: `RESULT {json}`.
//
// Usage: DATABASE_URL=postgres://... node noop.js <jobs>
"use strict";
const { run, makeWorkerUtils } = require("graphile-worker");

function graphileVersion() {
  const path = require("path");
  const main = require.resolve("graphile-worker");
  const pkg = path.join(path.dirname(main), "..", "package.json");
  return JSON.parse(require("fs").readFileSync(pkg, "utf8")).version;
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
  await utils.release();

  let done = 0;
  let finished;
  const allDone = new Promise((resolve) => (finished = resolve));
  const t0 = process.hrtime.bigint();
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
  await runner.stop();
  const secs = Number(t1 - t0) / 1e9;
  const out = {
    peer: "graphile-worker",
    version: graphileVersion(),
    node: process.version,
    jobs,
    concurrency: 10,
    secs: Number(secs.toFixed(3)),
    jobs_per_s: Math.round(jobs / secs),
  };
  // graphile-worker logs every job on stdout; the result line is marked.
  process.stdout.write("RESULT " + JSON.stringify(out) + "\n");
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
