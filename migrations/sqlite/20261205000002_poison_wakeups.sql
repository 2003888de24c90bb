-- Poison wake-ups (see migrations/postgres/…_poison_wakeups.sql). SQLite
-- cannot change a CHECK: recon_cases is rebuilt, rows and ids kept.
-- wake_failures.case_id is a plain number (no REFERENCES), so a later
-- rebuild of recon_cases stays possible.
CREATE TABLE recon_cases_new (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    kind            TEXT NOT NULL CHECK (kind IN ('double_charge', 'unmatched_charge',
                        'unmatched_refund', 'missing_at_gateway', 'amount_mismatch',
                        'dispute', 'poison_wakeup')),
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
CREATE INDEX recon_cases_open ON recon_cases (opened_at) WHERE resolved_at IS NULL;

CREATE TABLE wake_failures (
    attempt_id      TEXT PRIMARY KEY REFERENCES payment_attempts (id),
    failures        INTEGER NOT NULL CHECK (failures >= 1),
    first_failed_at INTEGER NOT NULL,
    last_failed_at  INTEGER NOT NULL,
    last_error      TEXT NOT NULL,
    case_id         INTEGER
) STRICT;
