-- migrations/postgres/…_every_send_held.sql on SQLite (read it for why): a
-- resend (DESCONOCIDO -> EN_PROCESO) of a charge meets the holds its first
-- send meets. SQLite has no functions to share, so the trigger's body is
-- written again here, unchanged, under its new name and condition.

DROP TRIGGER first_send_gate;
CREATE TRIGGER send_gate BEFORE UPDATE OF state ON payment_attempts
WHEN NEW.state = 'EN_PROCESO' AND OLD.state IS NOT 'EN_PROCESO' AND NEW.kind <> 'refund'
BEGIN
    SELECT RAISE(ABORT, 'CB011: the order has an open case saying the gateway may have charged it: the charge is not sent until finance resolves the case (cobro escalations resolve-case)')
     WHERE EXISTS (SELECT 1 FROM recon_cases c
                    WHERE c.order_id = NEW.order_id AND c.resolved_at IS NULL
                      AND c.kind NOT IN (SELECT kind FROM harmless_case_kinds)
                      AND c.attempt_id IS NOT NEW.id);
    SELECT RAISE(ABORT, 'CB012: the order was cancelled with a reason that means do not charge it: charge a new order instead')
     WHERE EXISTS (SELECT 1 FROM payment_attempts a
                    WHERE a.order_id = NEW.order_id AND a.kind <> 'refund'
                      AND a.cancel_reason IN (SELECT reason FROM order_holding_cancel_reasons));
END;
