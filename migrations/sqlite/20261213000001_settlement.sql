-- Settlement reconciliation (see migrations/postgres/…_settlement.sql).
-- SQLite cannot change a CHECK: recon_cases is rebuilt, rows and ids kept.
-- The charge gate's trigger names recon_cases, so the rebuild runs with
-- legacy_alter_table (the rename then leaves triggers as they are and does
-- not re-check them against the schema half-way through).
PRAGMA legacy_alter_table = ON;
CREATE TABLE recon_cases_new (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    kind            TEXT NOT NULL CHECK (kind IN ('double_charge', 'unmatched_charge',
                        'unmatched_refund', 'missing_at_gateway', 'amount_mismatch',
                        'dispute', 'poison_wakeup',
                        'unsettled', 'fee_mismatch', 'payout_mismatch')),
    dedupe_key      TEXT NOT NULL UNIQUE,
    order_id        TEXT,
    attempt_id      TEXT REFERENCES payment_attempts (id),
    gateway_ref     TEXT,
    details         TEXT NOT NULL CHECK (json_valid(details)),
    window_from     INTEGER NOT NULL,
    window_to       INTEGER NOT NULL,
    opened_at       INTEGER NOT NULL,
    resolved_at     INTEGER,
    resolved_by     TEXT,
    resolution_note TEXT,
    CHECK ((resolved_at IS NULL) = (resolved_by IS NULL))
) STRICT;
INSERT INTO recon_cases_new SELECT * FROM recon_cases;
DROP TABLE recon_cases;
ALTER TABLE recon_cases_new RENAME TO recon_cases;
PRAGMA legacy_alter_table = OFF;
CREATE INDEX recon_cases_open ON recon_cases (opened_at) WHERE resolved_at IS NULL;
CREATE INDEX recon_cases_open_order ON recon_cases (order_id) WHERE resolved_at IS NULL;

INSERT INTO harmless_case_kinds (kind) VALUES ('unsettled'), ('fee_mismatch'), ('payout_mismatch');

CREATE TABLE settlements (
    attempt_id   TEXT PRIMARY KEY REFERENCES payment_attempts (id),
    balance_txn  TEXT NOT NULL UNIQUE CHECK (length(balance_txn) BETWEEN 1 AND 255),
    gross_minor  INTEGER NOT NULL CHECK (gross_minor > 0),
    fee_minor    INTEGER NOT NULL,
    net_minor    INTEGER NOT NULL,
    currency     TEXT NOT NULL REFERENCES currencies (code),
    payout       TEXT CHECK (payout IS NULL OR length(payout) BETWEEN 1 AND 255),
    settled_at   INTEGER NOT NULL,
    recorded_at  INTEGER NOT NULL,
    CHECK (net_minor = gross_minor - fee_minor)
) STRICT;
CREATE INDEX settlements_settled_at ON settlements (settled_at);

CREATE TRIGGER settlement_written_once BEFORE UPDATE ON settlements
WHEN NEW.attempt_id IS NOT OLD.attempt_id OR NEW.balance_txn IS NOT OLD.balance_txn
  OR NEW.gross_minor IS NOT OLD.gross_minor OR NEW.fee_minor IS NOT OLD.fee_minor
  OR NEW.currency IS NOT OLD.currency OR NEW.settled_at IS NOT OLD.settled_at
  OR (OLD.payout IS NOT NULL AND NEW.payout IS NOT OLD.payout)
BEGIN
    SELECT RAISE(ABORT, 'CB030: a settlement is written once: only a missing payout may be filled in');
END;
CREATE TRIGGER settlement_of_approved_charge BEFORE INSERT ON settlements
WHEN NOT EXISTS (SELECT 1 FROM payment_attempts a
                  WHERE a.id = NEW.attempt_id AND a.kind <> 'refund' AND a.state = 'APROBADO'
                    AND a.amount_minor = NEW.gross_minor AND a.currency = NEW.currency)
BEGIN
    SELECT RAISE(ABORT, 'CB030: a settlement must be of an APROBADO charge, in its amount and currency');
END;
