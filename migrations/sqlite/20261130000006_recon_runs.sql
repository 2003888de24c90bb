-- Reconciliation runs (see migrations/postgres/…_recon_runs.sql). Times are
-- INTEGER milliseconds since the Unix epoch.

CREATE TABLE recon_runs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    window_from INTEGER NOT NULL,
    window_to   INTEGER NOT NULL,
    claimed_by  TEXT NOT NULL,
    claimed_at  INTEGER NOT NULL,
    tries       INTEGER NOT NULL DEFAULT 1 CHECK (tries >= 1),
    finished_at INTEGER,
    outcome     TEXT CHECK (outcome IN ('ok', 'failed')),
    report      TEXT CHECK (report IS NULL OR json_valid(report)),
    UNIQUE (window_from, window_to),
    CHECK (window_to > window_from),
    CHECK ((finished_at IS NULL) = (outcome IS NULL))
) STRICT;

CREATE INDEX payment_attempts_created ON payment_attempts (created_at);
CREATE INDEX payment_attempts_gateway_id ON payment_attempts (gateway_charge_id)
    WHERE gateway_charge_id IS NOT NULL;
