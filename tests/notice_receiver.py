"""A customer app's notice endpoint, for tests/notices.rs.

Listens on 127.0.0.1 (a free port, printed as the first line of stdout),
verifies every POST with the official Standard Webhooks library
(`standardwebhooks.Webhook(secret).verify`), deduplicates by `webhook-id`,
and misbehaves on purpose for chosen orders:

  fail_twice:   answer 500 to the first two tries of the order's notices
  always_fail:  answer 500 to every try
  slow_once:    the first try of the order's first notice is received,
                then answered only after `slow_seconds` (past the sender's
                timeout): a redelivery follows that must be deduplicated

GET /report answers what was received, as JSON.

Environment: NOTICE_SECRET (whsec_...), NOTICE_PLAN (JSON with the three
lists and slow_seconds).
"""

import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook

SECRET = os.environ["NOTICE_SECRET"]
PLAN = json.loads(os.environ.get("NOTICE_PLAN", "{}"))
MAX_BODY = 64 * 1024

lock = threading.Lock()
tries = {}  # webhook-id -> tries seen (verified ones)
received = {}  # webhook-id -> the payload, once (after deduplication)
order = []  # webhook-ids in the order first received
duplicates = {}  # webhook-id -> redeliveries of an already received notice
rejected = []  # why unverifiable requests were refused
slowed = set()  # orders whose one slow answer was given


class Receiver(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def answer(self, status, body=b""):
        try:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the sender gave up waiting (the slow answer)

    def do_GET(self):
        if self.path != "/report":
            return self.answer(404)
        with lock:
            report = {
                "tries": tries,
                "received": [received[i] for i in order],
                "ids": order,
                "duplicates": duplicates,
                "rejected": rejected,
            }
        self.answer(200, json.dumps(report).encode())

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        if length > MAX_BODY:
            return self.answer(413)
        body = self.rfile.read(length).decode()
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            payload = Webhook(SECRET).verify(body, headers)
        except Exception as e:  # the library's WebhookVerificationError
            with lock:
                rejected.append(str(e))
            return self.answer(400, b"signature")
        msg_id = headers["webhook-id"]
        order_id = payload["data"]["order_id"]
        with lock:
            tries[msg_id] = tries.get(msg_id, 0) + 1
            n = tries[msg_id]
        if order_id in PLAN.get("always_fail", []):
            return self.answer(500, b"always failing")
        if order_id in PLAN.get("fail_twice", []) and n <= 2:
            return self.answer(500, b"failing twice")
        with lock:
            if msg_id in received:
                duplicates[msg_id] = duplicates.get(msg_id, 0) + 1
            else:
                received[msg_id] = payload
                order.append(msg_id)
        with lock:
            slow = order_id in PLAN.get("slow_once", []) and order_id not in slowed
            slowed.add(order_id)
        if slow:
            time.sleep(PLAN.get("slow_seconds", 2))
        self.answer(204)


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
