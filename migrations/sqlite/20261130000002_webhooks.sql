-- Gateway webhooks (see migrations/postgres/…_webhooks.sql): accepted events
-- once by id, in the transaction of the transition they cause; rejected
-- deliveries recorded.

CREATE TABLE webhook_events (
    event_id        TEXT PRIMARY KEY CHECK (length(event_id) BETWEEN 1 AND 255),
    event_type      TEXT NOT NULL,
    idempotency_key TEXT,
    attempt_id      TEXT REFERENCES payment_attempts (id),
    outcome         TEXT NOT NULL CHECK (outcome IN ('applied', 'noop', 'unmatched', 'ignored')),
    detail          TEXT,
    payload         TEXT NOT NULL CHECK (json_valid(payload)),
    received_at     INTEGER NOT NULL
) STRICT;
CREATE INDEX webhook_events_attempt ON webhook_events (attempt_id);

CREATE TABLE rejected_webhooks (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    reason      TEXT NOT NULL,
    detail      TEXT,
    headers     TEXT NOT NULL CHECK (json_valid(headers)),
    body_size   INTEGER NOT NULL,
    received_at INTEGER NOT NULL
) STRICT;
