-- A cancel settles a charge RECHAZADO on our word, not the gateway's, so it
-- is safe only for a charge that never reached the gateway. The store
-- refuses any other (store/cancel.rs: being sent, in doubt, in review, or
-- PENDIENTE to be sent again after an unknown outcome, check_count > 0),
-- but a raw UPDATE could still write a cancel over such an attempt, and a
-- new key could then charge the order while its first send completed.
-- Now the database holds it for every door: a cancel reason is first
-- written only on an attempt PENDIENTE that was never looked up (never in
-- doubt) or already RECHAZADO (a declined attempt whose retry is stopped,
-- or the hold recorded on it); anything else is refused (CB020).

CREATE FUNCTION cobro.cancel_only_before_the_gateway() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'attempt % is % after % lookup(s): it may have reached the gateway, so it is never cancelled, only settled, by the gateway''s word or by finance (cobro escalations resolve)',
        OLD.id, OLD.state, OLD.check_count USING ERRCODE = 'CB020';
END;
$$;
CREATE TRIGGER cancel_only_before_the_gateway
    BEFORE UPDATE OF cancel_reason ON cobro.payment_attempts
    FOR EACH ROW WHEN (OLD.cancel_reason IS NULL AND NEW.cancel_reason IS NOT NULL
                       AND NOT (OLD.state = 'RECHAZADO'
                                OR (OLD.state = 'PENDIENTE' AND OLD.check_count = 0)))
    EXECUTE FUNCTION cobro.cancel_only_before_the_gateway();
