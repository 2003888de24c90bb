-- cobro's own tables on SQLite (the embedded default). Same invariants as
-- migrations/postgres: unique keys, one approved and one live attempt per
-- order (partial unique indexes), an append-only transition log. Times are
-- INTEGER milliseconds since the Unix epoch; ids and keys are hyphenated
-- UUID text. apalis-sqlite's own tables (Jobs, Workers) are created by its
-- setup, which `cobro migrate` runs first.

CREATE TABLE currencies (
    code       TEXT PRIMARY KEY CHECK (length(code) = 3 AND code NOT GLOB '*[^A-Z]*'),
    minor_unit INTEGER NOT NULL CHECK (minor_unit BETWEEN 0 AND 4)
) STRICT;
INSERT INTO currencies (code, minor_unit) VALUES
  ('AED', 2),
  ('ARS', 2),
  ('AUD', 2),
  ('BHD', 3),
  ('BOB', 2),
  ('BRL', 2),
  ('CAD', 2),
  ('CHF', 2),
  ('CLP', 0),
  ('CNY', 2),
  ('COP', 2),
  ('CRC', 2),
  ('CZK', 2),
  ('DKK', 2),
  ('DOP', 2),
  ('EUR', 2),
  ('GBP', 2),
  ('GTQ', 2),
  ('HKD', 2),
  ('HNL', 2),
  ('HUF', 2),
  ('IDR', 2),
  ('ILS', 2),
  ('INR', 2),
  ('ISK', 0),
  ('JOD', 3),
  ('JPY', 0),
  ('KRW', 0),
  ('KWD', 3),
  ('MXN', 2),
  ('MYR', 2),
  ('NIO', 2),
  ('NOK', 2),
  ('NZD', 2),
  ('OMR', 3),
  ('PAB', 2),
  ('PEN', 2),
  ('PHP', 2),
  ('PLN', 2),
  ('PYG', 0),
  ('RON', 2),
  ('SAR', 2),
  ('SEK', 2),
  ('SGD', 2),
  ('THB', 2),
  ('TND', 3),
  ('TRY', 2),
  ('TWD', 2),
  ('UAH', 2),
  ('USD', 2),
  ('UYU', 2),
  ('VND', 0),
  ('ZAR', 2);

CREATE TABLE payment_attempts (
    id                TEXT PRIMARY KEY CHECK (length(id) = 36),
    order_id          TEXT NOT NULL CHECK (length(trim(order_id)) BETWEEN 1 AND 200),
    amount_minor      INTEGER NOT NULL CHECK (amount_minor > 0),
    currency          TEXT NOT NULL REFERENCES currencies (code),
    -- an opaque gateway token (pm_...), never card data
    payment_method    TEXT CHECK (length(payment_method) BETWEEN 1 AND 255
                                  AND payment_method NOT GLOB '*[^A-Za-z0-9_.:-]*'
                                  AND length(payment_method) - length(replace(replace(replace(replace(replace(replace(replace(replace(replace(replace(payment_method, '0', ''), '1', ''), '2', ''), '3', ''), '4', ''), '5', ''), '6', ''), '7', ''), '8', ''), '9', '')) < 12),
    idempotency_key   TEXT NOT NULL UNIQUE CHECK (length(idempotency_key) = 36),
    state             TEXT NOT NULL CHECK (state IN
                        ('PENDIENTE', 'EN_PROCESO', 'DESCONOCIDO', 'APROBADO', 'RECHAZADO', 'EN_REVISION')),
    kind              TEXT NOT NULL DEFAULT 'initial' CHECK (kind IN ('initial', 'business_retry')),
    attempt_number    INTEGER NOT NULL DEFAULT 1 CHECK (attempt_number >= 1),
    gateway_charge_id TEXT,
    decline_code      TEXT,
    check_count       INTEGER NOT NULL DEFAULT 0 CHECK (check_count >= 0),
    send_count        INTEGER NOT NULL DEFAULT 0 CHECK (send_count >= 0),
    next_action_at    INTEGER,
    lease_owner       TEXT,
    lease_expires_at  INTEGER,
    version           INTEGER NOT NULL DEFAULT 0,
    last_evidence     TEXT CHECK (last_evidence IS NULL OR json_valid(last_evidence)),
    woken_at          INTEGER,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    CHECK (state <> 'APROBADO' OR gateway_charge_id IS NOT NULL)
) STRICT;

CREATE UNIQUE INDEX one_approved_per_order ON payment_attempts (order_id)
    WHERE state = 'APROBADO';
CREATE UNIQUE INDEX one_live_attempt_per_order ON payment_attempts (order_id)
    WHERE state IN ('PENDIENTE', 'EN_PROCESO', 'DESCONOCIDO', 'EN_REVISION');
CREATE INDEX payment_attempts_due ON payment_attempts (next_action_at)
    WHERE state IN ('PENDIENTE', 'EN_PROCESO', 'DESCONOCIDO', 'RECHAZADO');
CREATE INDEX payment_attempts_order ON payment_attempts (order_id);

CREATE TABLE attempt_transitions (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    attempt_id    TEXT NOT NULL REFERENCES payment_attempts (id),
    from_state    TEXT,
    to_state      TEXT NOT NULL,
    cause         TEXT NOT NULL,
    actor         TEXT NOT NULL,
    http_status   INTEGER,
    error_kind    TEXT,
    lookup_result TEXT,
    evidence      TEXT,
    at            INTEGER NOT NULL
) STRICT;
CREATE INDEX attempt_transitions_attempt ON attempt_transitions (attempt_id, id);

CREATE TABLE attempt_checks (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    attempt_id    TEXT NOT NULL REFERENCES payment_attempts (id),
    check_number  INTEGER NOT NULL,
    scheduled_at  INTEGER NOT NULL,
    started_at    INTEGER NOT NULL,
    finished_at   INTEGER NOT NULL,
    lookup_result TEXT NOT NULL,
    http_status   INTEGER,
    error_kind    TEXT,
    actor         TEXT NOT NULL
) STRICT;
CREATE INDEX attempt_checks_attempt ON attempt_checks (attempt_id, id);

CREATE TRIGGER attempt_transitions_no_update BEFORE UPDATE ON attempt_transitions
BEGIN SELECT RAISE(ABORT, 'attempt_transitions is append-only: UPDATE is not allowed'); END;
CREATE TRIGGER attempt_transitions_no_delete BEFORE DELETE ON attempt_transitions
BEGIN SELECT RAISE(ABORT, 'attempt_transitions is append-only: DELETE is not allowed'); END;
CREATE TRIGGER attempt_checks_no_update BEFORE UPDATE ON attempt_checks
BEGIN SELECT RAISE(ABORT, 'attempt_checks is append-only: UPDATE is not allowed'); END;
CREATE TRIGGER attempt_checks_no_delete BEFORE DELETE ON attempt_checks
BEGIN SELECT RAISE(ABORT, 'attempt_checks is append-only: DELETE is not allowed'); END;
