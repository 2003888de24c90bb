-- A two-step gateway's own object for an attempt (Stripe: the PaymentIntent
-- `pi_…`), created unconfirmed with the attempt's key and recorded before
-- anything confirms it. Set once: the database refuses to change or clear
-- it, so a worker can never confirm a second PaymentIntent for one attempt.
ALTER TABLE payment_attempts ADD COLUMN gateway_ref text
    CHECK (gateway_ref IS NULL OR length(gateway_ref) BETWEEN 1 AND 255);
CREATE UNIQUE INDEX payment_attempts_gateway_ref ON payment_attempts (gateway_ref)
    WHERE gateway_ref IS NOT NULL;
CREATE TRIGGER payment_attempts_gateway_ref_set_once
    BEFORE UPDATE OF gateway_ref ON payment_attempts
    WHEN OLD.gateway_ref IS NOT NULL AND NEW.gateway_ref IS NOT OLD.gateway_ref
BEGIN
    SELECT RAISE(ABORT, 'gateway_ref is set once and never changes');
END;
