-- A resend (DESCONOCIDO -> EN_PROCESO) of a charge meets the holds its
-- first send meets: an open case that holds the order (CB011; not one
-- about the attempt itself), a cancel that means "do not charge it"
-- (CB012). 20261216000001_every_door_held.sql spared the resend because "it
-- carries the same key, which the gateway deduplicates"; but a resend
-- follows a lookup that found nothing under that key, so the gateway
-- executes it as a new charge, while a case says the order may already be
-- charged. A review found the path: finance's "check now" of an attempt
-- held before its first send, "not found", then a resend. The worker gives
-- a held resend to finance, as it gives a held first send.
--
-- The trigger is renamed for what it now guards (any move into EN_PROCESO);
-- its body is unchanged and still calls cobro.refuse_held_order, where a
-- later change belongs.

DROP TRIGGER first_send_gate ON cobro.payment_attempts;
ALTER FUNCTION cobro.first_send_gate() RENAME TO send_gate;
CREATE TRIGGER send_gate
    BEFORE UPDATE OF state ON cobro.payment_attempts
    FOR EACH ROW WHEN (NEW.state = 'EN_PROCESO' AND OLD.state IS DISTINCT FROM 'EN_PROCESO'
                       AND NEW.kind <> 'refund')
    EXECUTE FUNCTION cobro.send_gate();
