-- migrations/postgres/…_every_mark_logged.sql on SQLite (read it for why):
-- setting a refund's mark needs its row in the transition log (CB021).
-- SQLite has no deferred triggers, so the row is written first, in the
-- same transaction, and the UPDATE finds it: the same attempt, its new
-- version, the state kept, the mark's cause. One trigger for both marks
-- (an UPDATE sets one: refund_failed_at on an APROBADO refund,
-- refund_made_at on a RECHAZADO one).

CREATE TRIGGER refund_mark_logged
BEFORE UPDATE OF refund_failed_at, refund_made_at ON payment_attempts
WHEN (OLD.refund_failed_at IS NULL AND NEW.refund_failed_at IS NOT NULL)
  OR (OLD.refund_made_at IS NULL AND NEW.refund_made_at IS NOT NULL)
BEGIN
    SELECT RAISE(ABORT, 'CB021: a refund was marked (refund_failed_at or refund_made_at) without its row in attempt_transitions: write one first, in the same transaction (attempt_id, from_state = to_state = its state, cause refund_failed_after_success or refund_made_after_decline, actor, and version = the attempt''s new version)')
     WHERE NOT EXISTS (SELECT 1 FROM attempt_transitions t
                        WHERE t.attempt_id = NEW.id AND t.version = NEW.version
                          AND t.from_state = NEW.state AND t.to_state = NEW.state
                          AND t.cause = CASE WHEN NEW.refund_made_at IS NOT NULL
                                               AND OLD.refund_made_at IS NULL
                                             THEN 'refund_made_after_decline'
                                             ELSE 'refund_failed_after_success' END);
END;
