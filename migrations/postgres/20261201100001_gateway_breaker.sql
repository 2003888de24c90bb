-- The gateway circuit breaker, shared by every worker on the database, and
-- the attempts it parks.
--
-- An attempt is parked (parked_since set, next_action_at NULL, no lease)
-- while the gateway is unreachable as a whole: it keeps its state and its
-- check count, and the sweeper leaves it alone. When the gateway answers
-- again, workers re-wake parked attempts at a paced rate, oldest first.
ALTER TABLE cobro.payment_attempts ADD COLUMN parked_since timestamptz;
ALTER TABLE cobro.payment_attempts ADD CONSTRAINT parked_attempt_waits
    CHECK (parked_since IS NULL OR (lease_owner IS NULL AND next_action_at IS NULL));
CREATE INDEX payment_attempts_parked ON cobro.payment_attempts (parked_since, id)
    WHERE parked_since IS NOT NULL;

-- One row per gateway (its URL without credentials).
CREATE TABLE cobro.gateway_breakers (
    gateway          text PRIMARY KEY CHECK (length(gateway) BETWEEN 1 AND 300),
    state            text NOT NULL DEFAULT 'closed' CHECK (state IN ('closed', 'open')),
    -- Failed calls since the last answer (any worker's).
    failures         integer NOT NULL DEFAULT 0 CHECK (failures >= 0),
    failing_since    timestamptz,
    last_failure     text,
    last_failure_at  timestamptz,
    last_answer_at   timestamptz,
    opened_at        timestamptz,
    closed_at        timestamptz,
    -- Open: when the next single probe may go (one worker takes it).
    next_probe_at    timestamptz,
    probes           integer NOT NULL DEFAULT 0,
    -- Closed: when the next batch of parked attempts may be re-woken.
    next_rewake_at   timestamptz,
    CHECK (state = 'closed' OR (opened_at IS NOT NULL AND next_probe_at IS NOT NULL))
);

-- Every opening and closing, append-only.
CREATE TABLE cobro.gateway_breaker_events (
    id       bigserial PRIMARY KEY,
    gateway  text NOT NULL,
    state    text NOT NULL CHECK (state IN ('closed', 'open')),
    cause    text NOT NULL,
    actor    text NOT NULL,
    detail   text,
    at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX gateway_breaker_events_gateway ON cobro.gateway_breaker_events (gateway, id);
CREATE TRIGGER gateway_breaker_events_append_only
    BEFORE UPDATE OR DELETE ON cobro.gateway_breaker_events
    FOR EACH ROW EXECUTE FUNCTION cobro.refuse_change();
CREATE TRIGGER gateway_breaker_events_no_truncate
    BEFORE TRUNCATE ON cobro.gateway_breaker_events
    FOR EACH STATEMENT EXECUTE FUNCTION cobro.refuse_change();
REVOKE UPDATE, DELETE, TRUNCATE ON cobro.gateway_breaker_events FROM PUBLIC;

-- The rate limit toward each gateway across all workers: the time the next
-- request's slot starts (GCRA's theoretical arrival time). UNLOGGED: a
-- reservation is not money, and a commit that wrote only an unlogged table
-- does not wait for a WAL flush, so the one hot row stays cheap. After a
-- crash the table is empty and the next call starts it again.
CREATE UNLOGGED TABLE cobro.gateway_pace (
    gateway  text PRIMARY KEY,
    next_at  timestamptz NOT NULL
);
