// cobro from a Node app: what a merchant's engineer would copy.
//
// 1. In ONE transaction of the app's own: insert an order and enqueue its
//    charge with cobro.enqueue_charge(...); a rollback leaves no attempt.
// 2. Over HTTP: POST /charges with an API key; the same Idempotency-Key
//    twice gives the same attempt.
// 3. Read the attempt's state (GET /attempts/{id}) until a worker settles it.
// 4. Receive the customer notice cobro POSTs to the app and verify its
//    signature with the official Standard Webhooks library (npm
//    `standardwebhooks`).
//
// Settings (environment): DATABASE_URL (cobro's PostgreSQL), COBRO_URL
// (cobro serve), COBRO_API_KEY (a key with charges:write and attempts:read),
// COBRO_NOTICE_SECRET (the workers' whsec_ secret), NOTICE_PORT (where this
// app listens for notices: the workers' COBRO_NOTICE_URL). examples/run
// starts everything and runs this (after `npm ci`); its simulator declines
// every charge (insufficient_funds), so each charge settles RECHAZADO and
// cobro sends the notice payment.retry_scheduled. Exits non-zero on any
// failed check.

import { randomUUID } from "node:crypto";
import http from "node:http";
import pg from "pg";
import { Webhook, WebhookVerificationError } from "standardwebhooks";

const env = (name) => {
  const v = process.env[name];
  if (!v) fail(`${name} is not set`);
  return v;
};
const DATABASE_URL = env("DATABASE_URL");
const COBRO_URL = env("COBRO_URL").replace(/\/$/, "");
const API_KEY = env("COBRO_API_KEY");
const NOTICE_SECRET = env("COBRO_NOTICE_SECRET");
const NOTICE_PORT = Number(env("NOTICE_PORT"));
const RUN = randomUUID().slice(0, 8); // order ids unique to this run

function fail(what) {
  console.error(`node example: FAILED: ${what}`);
  process.exit(1);
}
function check(ok, what) {
  if (!ok) fail(what);
  console.log(`  ok: ${what}`);
}

// --- 1. the order and its charge commit together, or not at all ---------

/** The app's own transaction: its order row and cobro's attempt. */
async function placeOrder(client, orderId, amountMinor, currency) {
  await client.query("BEGIN");
  try {
    await client.query(
      "INSERT INTO orders (id, amount_minor, currency) VALUES ($1, $2, $3)",
      [orderId, amountMinor, currency],
    );
    // The key is generated when the intent is made; keep it with the order.
    const { rows } = await client.query(
      "SELECT attempt_id, idempotency_key, state, created" +
        " FROM cobro.enqueue_charge($1, $2, $3, $4)",
      [orderId, amountMinor, currency, randomUUID()],
    );
    await client.query("UPDATE orders SET attempt_id = $1 WHERE id = $2", [rows[0].attempt_id, orderId]);
    await client.query("COMMIT");
    return rows[0];
  } catch (e) {
    await client.query("ROLLBACK");
    throw e;
  }
}

async function inOneTransaction() {
  console.log("1. enqueue inside the app's own transaction (pg)");
  const client = new pg.Client({ connectionString: DATABASE_URL });
  await client.connect();
  try {
    await client.query(
      "CREATE TABLE IF NOT EXISTS orders (id text PRIMARY KEY, amount_minor bigint NOT NULL," +
        " currency text NOT NULL, attempt_id uuid)",
    );
    const order = `node-sql-${RUN}`;
    const a = await placeOrder(client, order, 1999, "USD");
    check(a.created && a.state === "PENDIENTE", `order ${order} and attempt ${a.attempt_id} committed (${a.state})`);

    // The same, but the app's transaction fails after the enqueue.
    const doomed = `node-rollback-${RUN}`;
    await client.query("BEGIN");
    await client.query("INSERT INTO orders (id, amount_minor, currency) VALUES ($1, 500, 'USD')", [doomed]);
    await client.query("SELECT * FROM cobro.enqueue_charge($1, 500, 'USD')", [doomed]);
    await client.query("ROLLBACK"); // the app failed before COMMIT
    const { rows } = await client.query(
      "SELECT count(*)::int AS n FROM cobro.payment_attempts WHERE order_id = $1",
      [doomed],
    );
    check(rows[0].n === 0, "a rolled-back transaction leaves no attempt");

    // Bad input is refused by the database, naming the field (SQLSTATE 22023).
    try {
      await client.query("SELECT * FROM cobro.enqueue_charge($1, -5, 'USD')", [`node-bad-${RUN}`]);
      fail("a negative amount is refused");
    } catch (e) {
      check(
        e.code === "22023" && e.message.startsWith("invalid amount_minor"),
        `a negative amount is refused: ${e.message}`,
      );
    }
  } finally {
    await client.end();
  }
}

// --- 2. over HTTP with an API key ----------------------------------------

async function api(method, path, body, idempotencyKey) {
  const headers = { Authorization: `Bearer ${API_KEY}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (idempotencyKey) headers["Idempotency-Key"] = idempotencyKey;
  const resp = await fetch(COBRO_URL + path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    redirect: "error",
    signal: AbortSignal.timeout(10_000),
  });
  return { status: resp.status, headers: resp.headers, body: await resp.json() };
}

async function overHttp() {
  console.log("2. enqueue over HTTP (POST /charges, Bearer key)");
  const key = randomUUID();
  const charge = { order_id: `node-http-${RUN}`, amount_minor: 2500, currency: "EUR" };
  const first = await api("POST", "/charges", charge, key);
  check(first.status === 201, `POST /charges answered ${first.status}: attempt ${first.body.attempt_id}`);
  const again = await api("POST", "/charges", charge, key);
  check(
    again.status === 201 &&
      again.body.attempt_id === first.body.attempt_id &&
      again.headers.get("idempotent-replayed") === "true",
    "the same Idempotency-Key again returns the same attempt (Idempotent-Replayed: true)",
  );
  return first.body.attempt_id;
}

// --- 3. read the attempt's state -----------------------------------------

const SETTLED = new Set(["APROBADO", "RECHAZADO", "EN_REVISION"]);

async function waitSettled(attemptId) {
  console.log(`3. read the attempt's state (GET /attempts/${attemptId})`);
  const deadline = Date.now() + 30_000;
  for (;;) {
    const { status, body } = await api("GET", `/attempts/${attemptId}`);
    if (status !== 200) fail(`GET /attempts/{id} answered ${status}: ${JSON.stringify(body)}`);
    const { attempt, transitions } = body;
    if (SETTLED.has(attempt.state)) {
      check(true, `settled: ${attempt.state} (history: ${transitions.map((t) => t.to_state).join(" -> ")})`);
      return attempt;
    }
    if (Date.now() > deadline) fail(`not settled within 30 s (still ${attempt.state})`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

// --- 4. the customer notice, verified ------------------------------------

const webhook = new Webhook(NOTICE_SECRET); // takes the whsec_ secret as cobro prints it
const verified = []; // { headers, body, payload }
let onNotice = () => {};

const receiver = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const body = Buffer.concat(chunks).toString("utf8");
    let payload;
    try {
      payload = webhook.verify(body, req.headers);
    } catch (e) {
      res.writeHead(e instanceof WebhookVerificationError ? 400 : 500).end(); // never act on it
      return;
    }
    // Deduplicate by webhook-id in a real app: a notice may come twice.
    verified.push({ headers: req.headers, body, payload });
    onNotice();
    res.writeHead(204).end(); // 2xx = delivered; cobro stops sending it
  });
});

async function noticeFor(attemptId) {
  console.log(`4. the customer notice for attempt ${attemptId}, verified with standardwebhooks`);
  const deadline = Date.now() + 60_000;
  for (;;) {
    const n = verified.find((v) => v.payload.data.attempt_id === attemptId);
    if (n) {
      check(true, `${n.headers["webhook-id"]}: ${n.payload.type}: ${n.payload.data.what_happened}`);
      const forged = n.body.replace('"amount_minor":2500', '"amount_minor":1');
      let refused = false;
      try {
        webhook.verify(forged, n.headers);
      } catch (e) {
        refused = e instanceof WebhookVerificationError;
      }
      check(forged !== n.body && refused, "a changed body fails verification");
      return n.payload;
    }
    const left = deadline - Date.now();
    if (left <= 0) fail("no verified notice for the attempt within 60 s");
    await new Promise((r) => {
      onNotice = r;
      setTimeout(r, Math.min(left, 1000));
    });
  }
}

async function main() {
  await new Promise((r) => receiver.listen(NOTICE_PORT, "127.0.0.1", r));
  await inOneTransaction();
  const attemptId = await overHttp();
  const attempt = await waitSettled(attemptId);
  // examples/run's simulator declines every charge, so a notice must follow.
  check(attempt.state === "RECHAZADO", "declined by examples/run's simulator, as set up");
  await noticeFor(attemptId);
  receiver.close();
  console.log("node example: all checks passed");
}

main().catch((e) => fail(e.stack || String(e)));
