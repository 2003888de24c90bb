-- Customer notices (the outbox); see migrations/postgres/…_notices.sql.
CREATE TABLE notices (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    order_id      TEXT NOT NULL,
    attempt_id    TEXT NOT NULL REFERENCES payment_attempts (id),
    kind          TEXT NOT NULL CHECK (kind IN ('retry_scheduled', 'payment_failed', 'approved_after_retry')),
    decline_code  TEXT,
    next_retry_at INTEGER,
    created_at    INTEGER NOT NULL,
    acked_at      INTEGER,
    acked_by      TEXT,
    UNIQUE (attempt_id, kind)
) STRICT;
CREATE INDEX notices_unacked ON notices (id) WHERE acked_at IS NULL;
