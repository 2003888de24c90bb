-- A two-step gateway's own object for an attempt (Stripe: the PaymentIntent
-- `pi_…`), created unconfirmed with the attempt's key and recorded before
-- anything confirms it. Set once: the database refuses to change or clear
-- it, so a worker can never confirm a second PaymentIntent for one attempt.
ALTER TABLE cobro.payment_attempts ADD COLUMN gateway_ref text
    CHECK (gateway_ref IS NULL OR length(gateway_ref) BETWEEN 1 AND 255);
CREATE UNIQUE INDEX payment_attempts_gateway_ref ON cobro.payment_attempts (gateway_ref)
    WHERE gateway_ref IS NOT NULL;

CREATE FUNCTION cobro.gateway_ref_set_once() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.gateway_ref IS NOT NULL AND NEW.gateway_ref IS DISTINCT FROM OLD.gateway_ref THEN
        RAISE EXCEPTION 'attempt %: gateway_ref % is set once and never changes', OLD.id, OLD.gateway_ref
            USING ERRCODE = 'CB008';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER payment_attempts_gateway_ref_set_once
    BEFORE UPDATE OF gateway_ref ON cobro.payment_attempts
    FOR EACH ROW EXECUTE FUNCTION cobro.gateway_ref_set_once();
