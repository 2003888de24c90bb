-- A refund the gateway made although cobro holds it RECHAZADO: its decline
-- came first (the gateway's answer, or finance's, confirmed), then the news
-- that it succeeded (a webhook, a lookup). Settled states stay settled, so
-- it stays RECHAZADO, marked refund_made_at, once, with a transition-log
-- row, and a case (unmatched_refund) opens for finance. Its amount counts
-- as refunded again, so nobody refunds it a second time while finance
-- looks: cobro.refunded_of (what cobro.guard_refund sums) and, for the
-- refund of a duplicate, one_refund_per_duplicate count it. The mark is
-- never undone; finance settles the case.
--
-- Only refunded_of's WHERE changes; the guard calls it
-- (…_rule_helpers.sql), so its body stays where it is.

ALTER TABLE cobro.payment_attempts ADD COLUMN refund_made_at timestamptz
    CHECK (refund_made_at IS NULL OR (kind = 'refund' AND state = 'RECHAZADO'));
CREATE FUNCTION cobro.refund_made_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'refund % was made at the gateway (seen at %) after it was declined here: that is never undone',
        OLD.id, OLD.refund_made_at USING ERRCODE = 'insufficient_privilege';
END;
$$;
CREATE TRIGGER refund_made_once
    BEFORE UPDATE ON cobro.payment_attempts
    FOR EACH ROW WHEN (OLD.refund_made_at IS NOT NULL
                       AND OLD.refund_made_at IS DISTINCT FROM NEW.refund_made_at)
    EXECUTE FUNCTION cobro.refund_made_once();

CREATE OR REPLACE FUNCTION cobro.refunded_of(p_charge_id uuid) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT coalesce(sum(a.amount_minor), 0)::bigint
      FROM cobro.payment_attempts a
     WHERE a.refund_of = p_charge_id AND a.refund_of_gateway IS NULL
       AND ((a.state <> 'RECHAZADO' AND a.refund_failed_at IS NULL) OR a.refund_made_at IS NOT NULL)
$$;

DROP INDEX cobro.one_refund_per_duplicate;
CREATE UNIQUE INDEX one_refund_per_duplicate ON cobro.payment_attempts (refund_of_gateway)
    WHERE refund_of_gateway IS NOT NULL
      AND ((state <> 'RECHAZADO' AND refund_failed_at IS NULL) OR refund_made_at IS NOT NULL);
