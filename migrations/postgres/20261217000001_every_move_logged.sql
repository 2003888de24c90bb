-- Every change of an attempt's state has its row in the transition log,
-- and the database holds it (the log was append-only, but nothing in the
-- database required a row per change: a raw UPDATE of `state` moved an
-- attempt and left no trace of who, why or when).
--
-- A log row now carries `version`, the attempt's version after the change
-- (NULL on rows written before this migration, and on the row that
-- creates an attempt, which changes no state). At commit, every UPDATE
-- that changed an attempt's state must have its row: the same attempt, the
-- same version, from the old state to the new one (CB021). The check is
-- deferred to the commit, so a statement may write the row before or after
-- the UPDATE, or (cobro's own compare-and-set) beside it in one statement.

ALTER TABLE cobro.attempt_transitions ADD COLUMN version bigint;

CREATE FUNCTION cobro.require_logged_move() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM cobro.attempt_transitions t
                    WHERE t.attempt_id = NEW.id AND t.version = NEW.version
                      AND t.from_state = OLD.state AND t.to_state = NEW.state) THEN
        RAISE EXCEPTION 'attempt % moved from % to % without its row in cobro.attempt_transitions: write one in the same transaction (attempt_id, from_state, to_state, cause, actor, and version = %, the attempt''s new version)',
            NEW.id, OLD.state, NEW.state, NEW.version
            USING ERRCODE = 'CB021';
    END IF;
    RETURN NULL;
END;
$$;
CREATE CONSTRAINT TRIGGER state_change_logged
    AFTER UPDATE OF state ON cobro.payment_attempts
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION cobro.require_logged_move();
