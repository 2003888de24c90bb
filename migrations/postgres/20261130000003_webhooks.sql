-- Gateway webhooks: every accepted event once (its id is UNIQUE and is
-- inserted in the same transaction as the transition it causes), and every
-- rejected delivery, so a forged or broken one leaves a trace (seed 003,
-- test 5: "debe rechazarse y registrarse").

CREATE TABLE cobro.webhook_events (
    event_id        text PRIMARY KEY CHECK (length(event_id) BETWEEN 1 AND 255),
    event_type      text NOT NULL,
    idempotency_key uuid,
    attempt_id      uuid REFERENCES cobro.payment_attempts (id),
    -- applied: moved the attempt; noop: not valid from its state (late or
    -- duplicate news); unmatched: no attempt with that key; ignored: a type
    -- cobro does not act on (stored and acknowledged)
    outcome         text NOT NULL CHECK (outcome IN ('applied', 'noop', 'unmatched', 'ignored')),
    detail          text,
    payload         jsonb NOT NULL,
    received_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_events_attempt ON cobro.webhook_events (attempt_id);

CREATE TABLE cobro.rejected_webhooks (
    id          bigserial PRIMARY KEY,
    reason      text NOT NULL,
    detail      text,
    -- only headers that are safe to keep (never a secret, never cookies)
    headers     jsonb NOT NULL,
    body_size   integer NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);
