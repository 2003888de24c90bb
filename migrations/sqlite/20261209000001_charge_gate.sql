-- Money at every door, on SQLite: the same rules as
-- migrations/postgres/…_charge_gate.sql (read it for the design), as
-- triggers. SQLite has one writer at a time (every door writes under
-- BEGIN IMMEDIATE), so the checks cannot race; there is no advisory lock.
-- Messages lead with the code the Rust side maps, as PostgreSQL's
-- SQLSTATEs (CB001, CB002, CB011, CB012, CB020; "invalid amount_minor").
-- The key derivation (cobro.retry_key on PostgreSQL) runs in Rust here
-- (src/domain/key.rs): SQLite has no SHA-256.

CREATE TABLE settings (
    only_row         INTEGER PRIMARY KEY CHECK (only_row = 1),
    max_amount_minor INTEGER NOT NULL DEFAULT 99999999
                     CHECK (max_amount_minor BETWEEN 1 AND 999999999999),
    key_namespace    TEXT NOT NULL CHECK (length(key_namespace) = 36),
    updated_at       INTEGER NOT NULL
) STRICT;
INSERT INTO settings (only_row, key_namespace, updated_at)
SELECT 1,
       lower(substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-' || substr(h, 13, 4) || '-'
             || substr(h, 17, 4) || '-' || substr(h, 21, 12)),
       CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
  FROM (SELECT hex(randomblob(16)) AS h);
CREATE TRIGGER settings_keep_the_row BEFORE DELETE ON settings
BEGIN SELECT RAISE(ABORT, 'settings keeps its one row: DELETE is not allowed'); END;
CREATE TRIGGER settings_namespace_fixed BEFORE UPDATE ON settings
WHEN OLD.key_namespace IS NOT NEW.key_namespace
BEGIN
    SELECT RAISE(ABORT, 'settings.key_namespace never changes: business-retry keys are derived from it');
END;

CREATE INDEX recon_cases_open_order ON recon_cases (order_id) WHERE resolved_at IS NULL;

-- A refund that fails after it looked settled: marked refund_failed_at,
-- once; its amount is free to refund again (the PostgreSQL migration says
-- why). The refund trigger is …_duplicate_refund.sql's but for that one
-- condition (AND refund_failed_at IS NULL).
ALTER TABLE payment_attempts ADD COLUMN refund_failed_at INTEGER
    CHECK (refund_failed_at IS NULL OR (kind = 'refund' AND state = 'APROBADO'));
CREATE TRIGGER refund_failed_once BEFORE UPDATE ON payment_attempts
WHEN OLD.refund_failed_at IS NOT NULL AND OLD.refund_failed_at IS NOT NEW.refund_failed_at
BEGIN
    SELECT RAISE(ABORT, 'this refund failed at the gateway: that is never undone');
END;
DROP INDEX one_refund_per_duplicate;
CREATE UNIQUE INDEX one_refund_per_duplicate ON payment_attempts (refund_of_gateway)
    WHERE refund_of_gateway IS NOT NULL AND state <> 'RECHAZADO' AND refund_failed_at IS NULL;

DROP TRIGGER refunds_within_capture;
CREATE TRIGGER refunds_within_capture BEFORE INSERT ON payment_attempts
WHEN NEW.kind = 'refund'
BEGIN
    SELECT RAISE(ABORT, 'CB404: the attempt to refund does not exist')
     WHERE NOT EXISTS (SELECT 1 FROM payment_attempts WHERE id = NEW.refund_of);
    SELECT RAISE(ABORT, 'CB007: only an APROBADO charge can be refunded')
     WHERE NOT EXISTS (SELECT 1 FROM payment_attempts
                        WHERE id = NEW.refund_of AND state = 'APROBADO' AND kind <> 'refund');
    SELECT RAISE(ABORT, 'invalid currency: a refund has its charge''s order and currency')
     WHERE NOT EXISTS (SELECT 1 FROM payment_attempts
                        WHERE id = NEW.refund_of AND order_id = NEW.order_id
                          AND currency = NEW.currency);
    SELECT RAISE(ABORT, 'CB007: the gateway charge is the order''s own approved charge, not a duplicate: refund it the usual way')
     WHERE NEW.refund_of_gateway IS NOT NULL
       AND EXISTS (SELECT 1 FROM payment_attempts
                    WHERE id = NEW.refund_of AND gateway_charge_id = NEW.refund_of_gateway);
    SELECT RAISE(ABORT, 'CB008: the refund exceeds what is left to refund of its charge')
     WHERE NEW.refund_of_gateway IS NULL
       AND (SELECT coalesce(sum(amount_minor), 0) FROM payment_attempts
             WHERE refund_of = NEW.refund_of AND state <> 'RECHAZADO'
               AND refund_of_gateway IS NULL AND refund_failed_at IS NULL) + NEW.amount_minor
           > (SELECT amount_minor FROM payment_attempts WHERE id = NEW.refund_of);
END;

-- What holds an order, as data the trigger reads (cobro.case_kind_holds_order
-- and cobro.cancel_holds_order on PostgreSQL say the same; the Rust side
-- reads these tables to word a refusal, tests/charge_gate.rs compares).
CREATE TABLE harmless_case_kinds (kind TEXT PRIMARY KEY) STRICT;
INSERT INTO harmless_case_kinds (kind) VALUES ('missing_at_gateway');
CREATE TABLE order_holding_cancel_reasons (reason TEXT PRIMARY KEY) STRICT;
INSERT INTO order_holding_cancel_reasons (reason) VALUES
    ('paid_by_other_means'), ('fraud_suspected'), ('duplicate_order');

-- SQLite runs the triggers of one event newest first: charge_gate is
-- created after refunds_within_capture (re-created above), so an amount
-- over the maximum is refused as such before a refund's capture is summed.
-- Messages are constant strings: a schema whose RAISE takes an expression
-- cannot be read by SQLite before 3.47 (Debian 12's sqlite3 CLI is 3.40),
-- so the Rust side words the refusal from its code (store::gate).
CREATE TRIGGER charge_gate BEFORE INSERT ON payment_attempts
BEGIN
    SELECT RAISE(ABORT, 'invalid amount_minor: above the maximum in settings (set by `cobro migrate --max-amount-minor` or COBRO_MAX_AMOUNT_MINOR)')
      FROM settings s WHERE NEW.amount_minor > s.max_amount_minor;
    SELECT RAISE(ABORT, 'CB002: the order already has an approved charge: no new charge attempt')
     WHERE NEW.kind <> 'refund'
       AND EXISTS (SELECT 1 FROM payment_attempts a
                    WHERE a.order_id = NEW.order_id AND a.kind <> 'refund' AND a.state = 'APROBADO');
    SELECT RAISE(ABORT, 'CB001: the order already has a live attempt: no new charge attempt until it settles')
     WHERE NEW.kind <> 'refund'
       AND EXISTS (SELECT 1 FROM payment_attempts a
                    WHERE a.order_id = NEW.order_id AND a.kind <> 'refund'
                      AND a.state IN ('PENDIENTE', 'EN_PROCESO', 'DESCONOCIDO', 'EN_REVISION'));
    SELECT RAISE(ABORT, 'CB011: the order has an open case saying the gateway may have charged it: no new charge attempt until finance resolves the case (cobro escalations resolve-case)')
     WHERE NEW.kind <> 'refund'
       AND EXISTS (SELECT 1 FROM recon_cases c
                    WHERE c.order_id = NEW.order_id AND c.resolved_at IS NULL
                      AND c.kind NOT IN (SELECT kind FROM harmless_case_kinds));
    SELECT RAISE(ABORT, 'CB012: the order was cancelled with a reason that means do not charge it: charge a new order instead')
     WHERE NEW.kind <> 'refund'
       AND EXISTS (SELECT 1 FROM payment_attempts a
                    WHERE a.order_id = NEW.order_id AND a.kind <> 'refund'
                      AND a.cancel_reason IN (SELECT reason FROM order_holding_cancel_reasons));
END;

-- The moves src/state.rs's transition() makes between two different states.
CREATE TABLE state_moves (
    from_state TEXT NOT NULL,
    to_state   TEXT NOT NULL,
    PRIMARY KEY (from_state, to_state)
) STRICT;
INSERT INTO state_moves (from_state, to_state) VALUES
    ('PENDIENTE',   'EN_PROCESO'),
    ('PENDIENTE',   'APROBADO'),
    ('PENDIENTE',   'RECHAZADO'),
    ('PENDIENTE',   'EN_REVISION'),
    ('EN_PROCESO',  'PENDIENTE'),
    ('EN_PROCESO',  'DESCONOCIDO'),
    ('EN_PROCESO',  'APROBADO'),
    ('EN_PROCESO',  'RECHAZADO'),
    ('EN_PROCESO',  'EN_REVISION'),
    ('DESCONOCIDO', 'EN_PROCESO'),
    ('DESCONOCIDO', 'APROBADO'),
    ('DESCONOCIDO', 'RECHAZADO'),
    ('DESCONOCIDO', 'EN_REVISION'),
    ('EN_REVISION', 'DESCONOCIDO'),
    ('EN_REVISION', 'APROBADO'),
    ('EN_REVISION', 'RECHAZADO');
CREATE TRIGGER state_moves_no_insert BEFORE INSERT ON state_moves
BEGIN SELECT RAISE(ABORT, 'state_moves is the state machine''s table: INSERT is not allowed'); END;
CREATE TRIGGER state_moves_no_update BEFORE UPDATE ON state_moves
BEGIN SELECT RAISE(ABORT, 'state_moves is the state machine''s table: UPDATE is not allowed'); END;
CREATE TRIGGER state_moves_no_delete BEFORE DELETE ON state_moves
BEGIN SELECT RAISE(ABORT, 'state_moves is the state machine''s table: DELETE is not allowed'); END;

CREATE TRIGGER hold_settled_states BEFORE UPDATE OF state ON payment_attempts
WHEN OLD.state IS NOT NEW.state
 AND NOT EXISTS (SELECT 1 FROM state_moves m WHERE m.from_state = OLD.state AND m.to_state = NEW.state)
BEGIN
    SELECT RAISE(ABORT, 'CB020: this attempt cannot move so: a settled attempt stays settled (a contradiction opens a case for finance)')
     WHERE OLD.state IN ('APROBADO', 'RECHAZADO');
    SELECT RAISE(ABORT, 'CB020: this attempt cannot move so: not a move of the state machine (src/state.rs)');
END;
