-- The incident switch (see migrations/postgres/…_pause_switch.sql). Times
-- are Unix milliseconds.
CREATE TABLE pause_switch (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    paused      INTEGER NOT NULL CHECK (paused IN (0, 1)),
    changed_at  INTEGER NOT NULL,
    changed_by  TEXT NOT NULL CHECK (length(changed_by) BETWEEN 1 AND 200),
    reason      TEXT CHECK (reason IS NULL OR length(reason) <= 500)
) STRICT;
CREATE TABLE pause_events (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    paused  INTEGER NOT NULL,
    actor   TEXT NOT NULL,
    reason  TEXT,
    at      INTEGER NOT NULL
) STRICT;
CREATE TRIGGER pause_events_no_update BEFORE UPDATE ON pause_events
BEGIN SELECT RAISE(ABORT, 'pause_events is append-only: UPDATE is not allowed'); END;
CREATE TRIGGER pause_events_no_delete BEFORE DELETE ON pause_events
BEGIN SELECT RAISE(ABORT, 'pause_events is append-only: DELETE is not allowed'); END;
