-- migrations/postgres/…_every_move_logged.sql on SQLite: every change of an
-- attempt's state has its row in the transition log (CB021). SQLite has no
-- deferred triggers, so the row is written first, in the same transaction,
-- and the UPDATE finds it: the same attempt, its new version, from the old
-- state to the new one.

ALTER TABLE attempt_transitions ADD COLUMN version INTEGER;

CREATE TRIGGER state_change_logged BEFORE UPDATE OF state ON payment_attempts
WHEN OLD.state IS NOT NEW.state
BEGIN
    SELECT RAISE(ABORT, 'CB021: an attempt''s state changed without its row in attempt_transitions: write one first, in the same transaction (attempt_id, from_state, to_state, cause, actor, and version = the attempt''s new version)')
     WHERE NOT EXISTS (SELECT 1 FROM attempt_transitions t
                        WHERE t.attempt_id = NEW.id AND t.version = NEW.version
                          AND t.from_state = OLD.state AND t.to_state = NEW.state);
END;
