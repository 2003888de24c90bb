-- migrations/postgres/…_cancel_before_the_gateway.sql on SQLite (read it
-- for why): a cancel reason is first written only on an attempt PENDIENTE
-- that was never looked up, or already RECHAZADO; a cancel of a charge that
-- may have reached the gateway is refused at every door (CB020).

CREATE TRIGGER cancel_only_before_the_gateway BEFORE UPDATE OF cancel_reason ON payment_attempts
WHEN OLD.cancel_reason IS NULL AND NEW.cancel_reason IS NOT NULL
 AND NOT (OLD.state = 'RECHAZADO' OR (OLD.state = 'PENDIENTE' AND OLD.check_count = 0))
BEGIN
    SELECT RAISE(ABORT, 'CB020: this attempt may have reached the gateway (being sent, in doubt, in review, or PENDIENTE after a lookup): it is never cancelled, only settled, by the gateway''s word or by finance (cobro escalations resolve)');
END;
