-- Customer notices (the outbox): one row per event the customer should hear
-- about, written in the same transaction as that event. The app reads the
-- unacknowledged rows and acknowledges them; nothing here can create a
-- charge.
CREATE TABLE cobro.notices (
    id           bigserial PRIMARY KEY,
    order_id     text NOT NULL,
    attempt_id   uuid NOT NULL REFERENCES cobro.payment_attempts (id),
    -- retry_scheduled: declined, a new attempt comes at next_retry_at;
    -- payment_failed: declined for good (final code or out of attempts);
    -- approved_after_retry: a business retry succeeded
    kind         text NOT NULL CHECK (kind IN ('retry_scheduled', 'payment_failed', 'approved_after_retry')),
    decline_code text,
    next_retry_at timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    acked_at     timestamptz,
    acked_by     text,
    -- one notice per causing transition
    UNIQUE (attempt_id, kind)
);
CREATE INDEX notices_unacked ON cobro.notices (id) WHERE acked_at IS NULL;
