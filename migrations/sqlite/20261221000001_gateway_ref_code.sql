-- The set-once rule of gateway_ref (20261203000001_gateway_ref) leads its
-- message with its code, CB008, as PostgreSQL raises it: every door reads
-- the refusal as a rule's (an HTTP route answers 409), not as an outage.
-- The rule itself is unchanged.
DROP TRIGGER payment_attempts_gateway_ref_set_once;
CREATE TRIGGER payment_attempts_gateway_ref_set_once
    BEFORE UPDATE OF gateway_ref ON payment_attempts
    WHEN OLD.gateway_ref IS NOT NULL AND NEW.gateway_ref IS NOT OLD.gateway_ref
BEGIN
    SELECT RAISE(ABORT, 'CB008: gateway_ref is set once and never changes');
END;
