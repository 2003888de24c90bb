-- The gateway circuit breaker, shared by every worker on the database, and
-- the attempts it parks (see the PostgreSQL migration of the same name).
-- Times are INTEGER milliseconds since the Unix epoch.
ALTER TABLE payment_attempts ADD COLUMN parked_since INTEGER
    CHECK (parked_since IS NULL OR (lease_owner IS NULL AND next_action_at IS NULL));
CREATE INDEX payment_attempts_parked ON payment_attempts (parked_since, id)
    WHERE parked_since IS NOT NULL;

CREATE TABLE gateway_breakers (
    gateway          TEXT PRIMARY KEY CHECK (length(gateway) BETWEEN 1 AND 300),
    state            TEXT NOT NULL DEFAULT 'closed' CHECK (state IN ('closed', 'open')),
    failures         INTEGER NOT NULL DEFAULT 0 CHECK (failures >= 0),
    failing_since    INTEGER,
    last_failure     TEXT,
    last_failure_at  INTEGER,
    last_answer_at   INTEGER,
    opened_at        INTEGER,
    closed_at        INTEGER,
    next_probe_at    INTEGER,
    probes           INTEGER NOT NULL DEFAULT 0,
    next_rewake_at   INTEGER,
    CHECK (state = 'closed' OR (opened_at IS NOT NULL AND next_probe_at IS NOT NULL))
);

CREATE TABLE gateway_breaker_events (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    gateway  TEXT NOT NULL,
    state    TEXT NOT NULL CHECK (state IN ('closed', 'open')),
    cause    TEXT NOT NULL,
    actor    TEXT NOT NULL,
    detail   TEXT,
    at       INTEGER NOT NULL
);
CREATE INDEX gateway_breaker_events_gateway ON gateway_breaker_events (gateway, id);
CREATE TRIGGER gateway_breaker_events_no_update BEFORE UPDATE ON gateway_breaker_events
BEGIN SELECT RAISE(ABORT, 'gateway_breaker_events is append-only: UPDATE is not allowed'); END;
CREATE TRIGGER gateway_breaker_events_no_delete BEFORE DELETE ON gateway_breaker_events
BEGIN SELECT RAISE(ABORT, 'gateway_breaker_events is append-only: DELETE is not allowed'); END;

-- next_at in MICROseconds since the Unix epoch (a slot can be shorter than
-- a millisecond).
CREATE TABLE gateway_pace (
    gateway  TEXT PRIMARY KEY,
    next_at  INTEGER NOT NULL
);
