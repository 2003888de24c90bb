-- cobro's own tables, in schema cobro. The apalis schema (jobs, workers) is
-- created by apalis-postgres' setup, which `cobro migrate` runs first.
--
-- The payment_attempts table is the truth; an apalis job is only a wake-up.
-- The invariants below are enforced here, not only in code.

CREATE SCHEMA IF NOT EXISTS cobro;

-- ISO 4217 codes with their minor-unit exponent (same list as src/domain.rs).
CREATE TABLE cobro.currencies (
    code       text PRIMARY KEY CHECK (code ~ '^[A-Z]{3}$'),
    minor_unit smallint NOT NULL CHECK (minor_unit BETWEEN 0 AND 4)
);
INSERT INTO cobro.currencies (code, minor_unit) VALUES
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

CREATE TABLE cobro.payment_attempts (
    id                uuid PRIMARY KEY,
    order_id          text NOT NULL CHECK (length(btrim(order_id)) BETWEEN 1 AND 200),
    amount_minor      bigint NOT NULL CHECK (amount_minor > 0),
    currency          text NOT NULL REFERENCES cobro.currencies (code),
    -- an opaque gateway token (pm_...), never card data
    payment_method    text CHECK (payment_method ~ '^[A-Za-z0-9_.:-]{1,255}$'
                                  AND length(regexp_replace(payment_method, '[^0-9]', '', 'g')) < 12),
    idempotency_key   uuid NOT NULL UNIQUE,
    state             text NOT NULL CHECK (state IN
                        ('PENDIENTE', 'EN_PROCESO', 'DESCONOCIDO', 'APROBADO', 'RECHAZADO', 'EN_REVISION')),
    kind              text NOT NULL DEFAULT 'initial' CHECK (kind IN ('initial', 'business_retry')),
    attempt_number    integer NOT NULL DEFAULT 1 CHECK (attempt_number >= 1),
    gateway_charge_id text,
    decline_code      text,
    check_count       integer NOT NULL DEFAULT 0 CHECK (check_count >= 0),
    send_count        integer NOT NULL DEFAULT 0 CHECK (send_count >= 0),
    next_action_at    timestamptz,
    -- the lease: who is talking to the gateway for this attempt, until when
    lease_owner       text,
    lease_expires_at  timestamptz,
    -- the fencing token: every write is "UPDATE ... WHERE version = $seen"
    version           bigint NOT NULL DEFAULT 0,
    last_evidence     jsonb,
    -- when the sweeper last re-created a wake-up for this attempt
    woken_at          timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CHECK (state <> 'APROBADO' OR gateway_charge_id IS NOT NULL)
);

-- At most one approved attempt per order.
CREATE UNIQUE INDEX one_approved_per_order ON cobro.payment_attempts (order_id)
    WHERE state = 'APROBADO';
-- At most one live attempt per order.
CREATE UNIQUE INDEX one_live_attempt_per_order ON cobro.payment_attempts (order_id)
    WHERE state IN ('PENDIENTE', 'EN_PROCESO', 'DESCONOCIDO', 'EN_REVISION');
-- What the sweeper scans.
CREATE INDEX payment_attempts_due ON cobro.payment_attempts (next_action_at)
    WHERE state IN ('PENDIENTE', 'EN_PROCESO', 'DESCONOCIDO', 'RECHAZADO');
CREATE INDEX payment_attempts_order ON cobro.payment_attempts (order_id);

-- Append-only: one row per state change, written in the same transaction.
CREATE TABLE cobro.attempt_transitions (
    id            bigserial PRIMARY KEY,
    attempt_id    uuid NOT NULL REFERENCES cobro.payment_attempts (id),
    from_state    text,          -- NULL for the row that creates the attempt
    to_state      text NOT NULL,
    cause         text NOT NULL, -- enqueued, claim, gateway_approved, lookup_not_found, lease_expired, ...
    actor         text NOT NULL, -- app, worker:<name>, ...
    http_status   integer,
    error_kind    text,
    lookup_result text,
    evidence      jsonb,
    at            timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX attempt_transitions_attempt ON cobro.attempt_transitions (attempt_id, id);

-- Every lookup of an attempt in DESCONOCIDO: when it was due, when it ran, what it found.
CREATE TABLE cobro.attempt_checks (
    id            bigserial PRIMARY KEY,
    attempt_id    uuid NOT NULL REFERENCES cobro.payment_attempts (id),
    check_number  integer NOT NULL,
    scheduled_at  timestamptz NOT NULL,
    started_at    timestamptz NOT NULL,
    finished_at   timestamptz NOT NULL DEFAULT now(),
    lookup_result text NOT NULL,
    http_status   integer,
    error_kind    text,
    actor         text NOT NULL
);
CREATE INDEX attempt_checks_attempt ON cobro.attempt_checks (attempt_id, id);

CREATE FUNCTION cobro.refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'cobro.% is append-only: % is not allowed', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
CREATE TRIGGER attempt_transitions_append_only
    BEFORE UPDATE OR DELETE ON cobro.attempt_transitions
    FOR EACH ROW EXECUTE FUNCTION cobro.refuse_change();
CREATE TRIGGER attempt_transitions_no_truncate
    BEFORE TRUNCATE ON cobro.attempt_transitions
    FOR EACH STATEMENT EXECUTE FUNCTION cobro.refuse_change();
CREATE TRIGGER attempt_checks_append_only
    BEFORE UPDATE OR DELETE ON cobro.attempt_checks
    FOR EACH ROW EXECUTE FUNCTION cobro.refuse_change();
REVOKE UPDATE, DELETE, TRUNCATE ON cobro.attempt_transitions, cobro.attempt_checks FROM PUBLIC;
