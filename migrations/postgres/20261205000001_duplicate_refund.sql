-- Refunding a duplicate that exists only at the gateway (a double_charge
-- case): a refund attempt like any other (its own key, states, log, checks
-- and lookups), anchored on the order's APROBADO charge (which gives it its
-- order and currency) and sent against the duplicate's gateway id
-- (refund_of_gateway) instead of the anchor's.
--
-- Invariants enforced here, whoever writes:
--   * only a refund has a refund_of_gateway;
--   * it is never the anchor's own gateway charge (that one is refunded the
--     usual way, against its captured amount);
--   * one duplicate, one refund that has not failed (a unique index), so a
--     second request, a lost answer or a double click refunds nothing twice;
--   * a duplicate's refund does not count against the anchor's captured
--     amount (it returns another charge's money);
--   * like the rest of what an attempt sends, it never changes.

ALTER TABLE cobro.payment_attempts ADD COLUMN refund_of_gateway text
    CHECK (refund_of_gateway IS NULL
           OR (kind = 'refund' AND length(refund_of_gateway) BETWEEN 1 AND 255));
CREATE UNIQUE INDEX one_refund_per_duplicate ON cobro.payment_attempts (refund_of_gateway)
    WHERE refund_of_gateway IS NOT NULL AND state <> 'RECHAZADO';

CREATE OR REPLACE FUNCTION cobro.guard_refund() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_charge   cobro.payment_attempts;
    v_refunded bigint;
BEGIN
    SELECT * INTO v_charge FROM cobro.payment_attempts a WHERE a.id = NEW.refund_of FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no attempt with id %', NEW.refund_of USING ERRCODE = 'CB404';
    END IF;
    IF v_charge.kind = 'refund' OR v_charge.state <> 'APROBADO' THEN
        RAISE EXCEPTION 'attempt % is a % in state %: only an APROBADO charge can be refunded',
            v_charge.id, CASE WHEN v_charge.kind = 'refund' THEN 'refund' ELSE 'charge' END,
            v_charge.state USING ERRCODE = 'CB007';
    END IF;
    IF NEW.order_id <> v_charge.order_id OR NEW.currency <> v_charge.currency THEN
        RAISE EXCEPTION 'invalid currency: a refund has its charge''s order and currency (%, %)',
            v_charge.order_id, v_charge.currency USING ERRCODE = '22023';
    END IF;
    IF NEW.refund_of_gateway IS NOT NULL THEN
        IF NEW.refund_of_gateway = v_charge.gateway_charge_id THEN
            RAISE EXCEPTION 'gateway charge % is the order''s own approved charge (attempt %), not a duplicate: refund it the usual way',
                NEW.refund_of_gateway, v_charge.id USING ERRCODE = 'CB007';
        END IF;
        RETURN NEW;
    END IF;
    -- Read after the lock: every refund of this charge committed before it is counted.
    SELECT coalesce(sum(a.amount_minor), 0) INTO v_refunded
      FROM cobro.payment_attempts a
     WHERE a.refund_of = NEW.refund_of AND a.state <> 'RECHAZADO'
       AND a.refund_of_gateway IS NULL;
    IF v_refunded + NEW.amount_minor > v_charge.amount_minor THEN
        RAISE EXCEPTION 'refund of % % exceeds what is left to refund of attempt %: % of % already refunded or in flight',
            NEW.amount_minor, NEW.currency, v_charge.id, v_refunded, v_charge.amount_minor
            USING ERRCODE = 'CB008';
    END IF;
    RETURN NEW;
END;
$$;

DROP TRIGGER attempt_identity_fixed ON cobro.payment_attempts;
CREATE TRIGGER attempt_identity_fixed
    BEFORE UPDATE ON cobro.payment_attempts
    FOR EACH ROW WHEN (OLD.order_id IS DISTINCT FROM NEW.order_id
                       OR OLD.amount_minor IS DISTINCT FROM NEW.amount_minor
                       OR OLD.currency IS DISTINCT FROM NEW.currency
                       OR OLD.idempotency_key IS DISTINCT FROM NEW.idempotency_key
                       OR OLD.kind IS DISTINCT FROM NEW.kind
                       OR OLD.refund_of IS DISTINCT FROM NEW.refund_of
                       OR OLD.refund_of_gateway IS DISTINCT FROM NEW.refund_of_gateway)
    EXECUTE FUNCTION cobro.refuse_identity_change();
