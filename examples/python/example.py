"""cobro from a Python app: what a merchant's engineer would copy.

1. In ONE transaction of the app's own: insert an order and enqueue its
   charge with cobro.enqueue_charge(...); a rollback leaves no attempt.
2. Over HTTP: POST /charges with an API key; the same Idempotency-Key twice
   gives the same attempt.
3. Read the attempt's state (GET /attempts/{id}) until a worker settles it.
4. Receive the customer notice cobro POSTs to the app and verify its
   signature with the official Standard Webhooks library.

Settings (environment): DATABASE_URL (cobro's PostgreSQL), COBRO_URL (cobro
serve), COBRO_API_KEY (a key with charges:write and attempts:read),
COBRO_NOTICE_SECRET (the workers' whsec_ secret), NOTICE_PORT (where this
app listens for notices: the workers' COBRO_NOTICE_URL). examples/run starts
everything and runs this; its simulator declines every charge
(insufficient_funds), so each charge settles RECHAZADO and cobro sends the
notice payment.retry_scheduled. Exits non-zero on any failed check.
"""

import http.server
import json
import os
import queue
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid

import psycopg
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

DATABASE_URL = os.environ["DATABASE_URL"]
COBRO_URL = os.environ["COBRO_URL"].rstrip("/")
API_KEY = os.environ["COBRO_API_KEY"]
NOTICE_SECRET = os.environ["COBRO_NOTICE_SECRET"]
NOTICE_PORT = int(os.environ["NOTICE_PORT"])
RUN = uuid.uuid4().hex[:8]  # order ids unique to this run


def check(ok, what):
    if not ok:
        sys.exit(f"python example: FAILED: {what}")
    print(f"  ok: {what}")


# --- 1. the order and its charge commit together, or not at all ----------

def place_order(conn, order_id, amount_minor, currency):
    """The app's own transaction: its order row and cobro's attempt."""
    with conn.transaction():
        conn.execute(
            "INSERT INTO orders (id, amount_minor, currency) VALUES (%s, %s, %s)",
            (order_id, amount_minor, currency),
        )
        # The key is generated when the intent is made; keep it with the order.
        key = uuid.uuid4()
        row = conn.execute(
            "SELECT attempt_id, idempotency_key, state, created"
            " FROM cobro.enqueue_charge(%s, %s, %s, %s)",
            (order_id, amount_minor, currency, key),
        ).fetchone()
        conn.execute("UPDATE orders SET attempt_id = %s WHERE id = %s", (row[0], order_id))
        return row


def in_one_transaction():
    print("1. enqueue inside the app's own transaction (psycopg)")
    with psycopg.connect(DATABASE_URL) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS orders ("
            " id text PRIMARY KEY, amount_minor bigint NOT NULL,"
            " currency text NOT NULL, attempt_id uuid)"
        )
        conn.commit()
        order = f"py-sql-{RUN}"
        attempt_id, key, state, created = place_order(conn, order, 1999, "USD")
        check(created and state == "PENDIENTE", f"order {order} and attempt {attempt_id} committed ({state})")

        # The same, but the app's transaction fails after the enqueue.
        doomed = f"py-rollback-{RUN}"
        try:
            with conn.transaction():
                conn.execute(
                    "INSERT INTO orders (id, amount_minor, currency) VALUES (%s, 500, 'USD')", (doomed,)
                )
                conn.execute("SELECT * FROM cobro.enqueue_charge(%s, 500, 'USD')", (doomed,))
                raise RuntimeError("the app fails before COMMIT")
        except RuntimeError:
            pass
        left = conn.execute(
            "SELECT count(*) FROM cobro.payment_attempts WHERE order_id = %s", (doomed,)
        ).fetchone()[0]
        check(left == 0, "a rolled-back transaction leaves no attempt")

        # Bad input is refused by the database, naming the field (SQLSTATE 22023).
        try:
            with conn.transaction():
                conn.execute("SELECT * FROM cobro.enqueue_charge(%s, -5, 'USD')", (f"py-bad-{RUN}",))
            check(False, "a negative amount is refused")
        except psycopg.errors.InvalidParameterValue as e:
            msg = e.diag.message_primary
            check(msg.startswith("invalid amount_minor"), f"a negative amount is refused: {msg}")
    return attempt_id


# --- 2. over HTTP with an API key ------------------------------------------

def api(method, path, body=None, key=None):
    req = urllib.request.Request(COBRO_URL + path, method=method)
    req.add_header("Authorization", f"Bearer {API_KEY}")
    if body is not None:
        req.add_header("Content-Type", "application/json")
        req.data = json.dumps(body).encode()
    if key is not None:
        req.add_header("Idempotency-Key", str(key))
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers, json.load(resp)
    except urllib.error.HTTPError as e:
        return e.code, e.headers, json.load(e)


def over_http():
    print("2. enqueue over HTTP (POST /charges, Bearer key)")
    order = f"py-http-{RUN}"
    key = uuid.uuid4()
    charge = {"order_id": order, "amount_minor": 2500, "currency": "EUR"}
    status, _, first = api("POST", "/charges", charge, key)
    check(status == 201, f"POST /charges answered {status}: attempt {first.get('attempt_id')}")
    status, headers, again = api("POST", "/charges", charge, key)
    check(
        status == 201 and again["attempt_id"] == first["attempt_id"]
        and headers.get("Idempotent-Replayed") == "true",
        "the same Idempotency-Key again returns the same attempt (Idempotent-Replayed: true)",
    )
    return first["attempt_id"]


# --- 3. read the attempt's state -------------------------------------------

SETTLED = {"APROBADO", "RECHAZADO", "EN_REVISION"}


def wait_settled(attempt_id):
    print(f"3. read the attempt's state (GET /attempts/{attempt_id})")
    deadline = time.monotonic() + 30
    while True:
        status, _, body = api("GET", f"/attempts/{attempt_id}")
        if status != 200:
            check(False, f"GET /attempts/{{id}} answered {status}: {body}")
        attempt = body["attempt"]
        if attempt["state"] in SETTLED:
            check(True, f"settled: {attempt['state']} (history: "
                  + " -> ".join(t["to_state"] for t in body["transitions"]) + ")")
            return attempt
        if time.monotonic() > deadline:
            check(False, f"settled within 30 s (still {attempt['state']})")
        time.sleep(0.5)


# --- 4. the customer notice, verified --------------------------------------

notices = queue.Queue()
webhook = Webhook(NOTICE_SECRET)  # takes the whsec_ secret as cobro prints it


class NoticeReceiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            payload = webhook.verify(body, headers)
        except WebhookVerificationError:
            self.send_response(400)  # not from cobro: refuse, never act on it
            self.end_headers()
            return
        # Deduplicate by webhook-id in a real app: a notice may come twice.
        notices.put((headers, body, payload))
        self.send_response(204)  # 2xx = delivered; cobro stops sending it
        self.end_headers()

    def log_message(self, *args):
        pass


def notice_for(attempt_id):
    print(f"4. the customer notice for attempt {attempt_id}, verified with standardwebhooks")
    deadline = time.monotonic() + 60
    while True:
        try:
            headers, body, payload = notices.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            check(False, "a verified notice arrived within 60 s")
        if payload["data"]["attempt_id"] != attempt_id:
            continue  # another order's notice, verified and acknowledged
        check(True, f"{headers['webhook-id']}: {payload['type']}: {payload['data']['what_happened']}")
        forged = body.replace('"amount_minor":2500', '"amount_minor":1')
        try:
            webhook.verify(forged, headers)
            check(False, "a changed body fails verification")
        except WebhookVerificationError:
            check(forged != body, "a changed body fails verification")
        return payload


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", NOTICE_PORT), NoticeReceiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    in_one_transaction()
    attempt_id = over_http()
    attempt = wait_settled(attempt_id)
    # examples/run's simulator declines every charge, so a notice must follow.
    check(attempt["state"] == "RECHAZADO", "declined by examples/run's simulator, as set up")
    notice_for(attempt_id)
    server.shutdown()
    print("python example: all checks passed")


if __name__ == "__main__":
    main()
