-- A refund's mark (refund_failed_at: failed at the gateway after we held it
-- APROBADO; refund_made_at: made after we held it RECHAZADO) changes what
-- is left to refund of its charge, as a move of state does, so it has its
-- row in the transition log too, and the database holds it: at commit,
-- every UPDATE that sets a mark must have its row, the same attempt and
-- version, the state kept, and the mark's cause (CB021, as for a move:
-- …_every_move_logged.sql). Before, a raw UPDATE could set a mark, and
-- free or hold a refund's amount, leaving no trace of who, why or when.

CREATE FUNCTION cobro.require_logged_mark() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM cobro.attempt_transitions t
                    WHERE t.attempt_id = NEW.id AND t.version = NEW.version
                      AND t.from_state = NEW.state AND t.to_state = NEW.state
                      AND t.cause = TG_ARGV[0]) THEN
        RAISE EXCEPTION 'refund % was marked (%) without its row in cobro.attempt_transitions: write one in the same transaction (attempt_id, from_state = to_state = %, cause %, actor, and version = %, the attempt''s new version)',
            NEW.id, TG_ARGV[1], NEW.state, TG_ARGV[0], NEW.version
            USING ERRCODE = 'CB021';
    END IF;
    RETURN NULL;
END;
$$;
CREATE CONSTRAINT TRIGGER refund_failed_logged
    AFTER UPDATE OF refund_failed_at ON cobro.payment_attempts
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (OLD.refund_failed_at IS NULL AND NEW.refund_failed_at IS NOT NULL)
    EXECUTE FUNCTION cobro.require_logged_mark('refund_failed_after_success', 'refund_failed_at');
CREATE CONSTRAINT TRIGGER refund_made_logged
    AFTER UPDATE OF refund_made_at ON cobro.payment_attempts
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (OLD.refund_made_at IS NULL AND NEW.refund_made_at IS NOT NULL)
    EXECUTE FUNCTION cobro.require_logged_mark('refund_made_after_decline', 'refund_made_at');
