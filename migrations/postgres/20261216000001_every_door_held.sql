-- Four holes a review found in the rules of 20261209000001_charge_gate.sql,
-- closed here, where every door meets them:
--
-- 1. A charge attempt created before a case opened was still sent: the
--    charge rule ran only when an attempt was inserted. Now the first send
--    of a charge (PENDIENTE -> EN_PROCESO, the claim) meets the same holds
--    (CB011: an open case that holds the order; CB012: a cancel that means
--    "do not charge it"), through one helper, cobro.refuse_held_order,
--    which charge_gate calls too. The worker moves such an attempt to
--    EN_REVISION for finance instead of sending it.
-- 2. The rules read "what is committed after the lock", which holds only
--    under READ COMMITTED: an app transaction in REPEATABLE READ or
--    SERIALIZABLE reads its old snapshot and could enqueue a second charge
--    for an approved order, or refund twice. Such a transaction is refused
--    (CB013) before it writes an attempt or claims one. cobro's own
--    connections set READ COMMITTED whatever the database's default.
-- 3. A duplicate's refund (refund_of_gateway) had no limit in the
--    database: the check that an open double_charge case lists it lived in
--    Rust only. Now a trigger requires an open double_charge case of the
--    order listing that gateway charge as approved, in the refund's
--    currency, for at least the refund's amount (CB007).
-- 4. An attempt's cancel_reason could be cleared or changed by an UPDATE,
--    lifting CB012. Once written it only ever changes from a reason that
--    does not hold the order to one that does (a cancel for the customer,
--    then fraud suspected: `cobro cancel` records the hold); anything else
--    is refused (CB020).
--
-- charge_gate keeps its checks, their order, messages and codes; it is now
-- made of helpers (cobro.refuse_over_maximum, cobro.refuse_charged_or_live,
-- cobro.refuse_held_order), and a later migration changes a helper, not the
-- trigger (tests/layers.rs).

CREATE FUNCTION cobro.require_read_committed(p_what text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    -- PostgreSQL runs READ UNCOMMITTED as READ COMMITTED.
    IF current_setting('transaction_isolation') NOT IN ('read committed', 'read uncommitted') THEN
        RAISE EXCEPTION 'cobro''s rules must see what other transactions committed, so % runs under READ COMMITTED; this transaction is %',
            p_what, upper(current_setting('transaction_isolation'))
            USING ERRCODE = 'CB013',
                  HINT = 'begin the transaction with BEGIN ISOLATION LEVEL READ COMMITTED (PostgreSQL''s default)';
    END IF;
END;
$$;

-- The holds on an order that no charge may pass, new or first sent: an
-- open case that says the gateway may have charged it (CB011), a cancel
-- whose reason means "do not charge it" (CB012). A case about the attempt
-- being sent (p_attempt) does not hold its own send: whatever the gateway
-- may hold under its key, the send carries the same key, which the
-- gateway deduplicates (a poison_wakeup case, about the attempt itself,
-- is released by closing it).
CREATE FUNCTION cobro.refuse_held_order(p_order_id text, p_what text, p_attempt uuid)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_case bigint;
    v_kind text;
BEGIN
    SELECT c.id, c.kind INTO v_case, v_kind FROM cobro.recon_cases c
     WHERE c.order_id = p_order_id AND c.resolved_at IS NULL
       AND cobro.case_kind_holds_order(c.kind)
       AND c.attempt_id IS DISTINCT FROM p_attempt
     ORDER BY c.id LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'order % has an open % case (#%): the gateway may have charged it, so no % until finance resolves the case (cobro escalations resolve-case --case % --by <you> --note <what was done>)',
            p_order_id, v_kind, v_case, p_what, v_case USING ERRCODE = 'CB011';
    END IF;
    SELECT a.cancel_reason INTO v_kind FROM cobro.payment_attempts a
     WHERE a.order_id = p_order_id AND a.kind <> 'refund'
       AND cobro.cancel_holds_order(a.cancel_reason) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'order % was cancelled (%): it must not be charged; charge a new order instead',
            p_order_id, v_kind USING ERRCODE = 'CB012';
    END IF;
END;
$$;

-- The checks of a new attempt that do not hold an order, as helpers too,
-- so that charge_gate is now made of helpers like the three big rules
-- (20261215000001_rule_helpers.sql) and the next change to one decision
-- redefines that helper, not the trigger (tests/layers.rs).
CREATE FUNCTION cobro.refuse_over_maximum(p_amount_minor bigint, p_currency text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_max bigint;
BEGIN
    SELECT s.max_amount_minor INTO v_max FROM cobro.settings s;
    IF p_amount_minor > v_max THEN
        RAISE EXCEPTION 'invalid amount_minor: must be at most % minor units (%), the maximum in cobro.settings (set by `cobro migrate --max-amount-minor` or COBRO_MAX_AMOUNT_MINOR), got %',
            v_max, cobro.major(v_max, p_currency), p_amount_minor
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- An order with an approved charge (CB002) or an attempt live or in doubt
-- (CB001) takes no new charge attempt. Reads what is committed after the
-- order's lock, which the caller holds.
CREATE FUNCTION cobro.refuse_charged_or_live(p_order_id text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_id    uuid;
    v_state text;
BEGIN
    SELECT a.id INTO v_id FROM cobro.payment_attempts a
     WHERE a.order_id = p_order_id AND a.kind <> 'refund' AND a.state = 'APROBADO' LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'order % already has an approved charge (attempt %): no new charge attempt',
            p_order_id, v_id USING ERRCODE = 'CB002';
    END IF;
    SELECT a.id, a.state INTO v_id, v_state FROM cobro.payment_attempts a
     WHERE a.order_id = p_order_id AND a.kind <> 'refund'
       AND a.state IN ('PENDIENTE', 'EN_PROCESO', 'DESCONOCIDO', 'EN_REVISION') LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'order % already has a live attempt (% is %): no new charge attempt until it settles',
            p_order_id, v_id, v_state USING ERRCODE = 'CB001';
    END IF;
END;
$$;

CREATE OR REPLACE FUNCTION cobro.charge_gate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cobro.refuse_over_maximum(NEW.amount_minor, NEW.currency);
    PERFORM cobro.require_read_committed(
        CASE WHEN NEW.kind = 'refund' THEN 'a refund' ELSE 'a charge attempt' END);
    IF NEW.kind = 'refund' THEN
        RETURN NEW;
    END IF;
    PERFORM cobro.lock_order(NEW.order_id);
    PERFORM cobro.refuse_charged_or_live(NEW.order_id);
    PERFORM cobro.refuse_held_order(NEW.order_id, 'new charge attempt', NULL);
    RETURN NEW;
END;
$$;

-- The first send of a charge: the claim that takes it from PENDIENTE to
-- EN_PROCESO. A resend (DESCONOCIDO -> EN_PROCESO) carries the same key,
-- which the gateway deduplicates, so it is not a new charge. No order lock:
-- the claim already holds the attempt's row, and a cancel (which takes the
-- lock, then the rows) would deadlock with it; a cancel waiting on the row
-- finds it EN_PROCESO and refuses, and a case committed before this
-- statement is seen by it (READ COMMITTED).
CREATE FUNCTION cobro.first_send_gate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cobro.require_read_committed('sending a charge');
    PERFORM cobro.refuse_held_order(NEW.order_id, 'charge is sent', NEW.id);
    RETURN NEW;
END;
$$;
CREATE TRIGGER first_send_gate
    BEFORE UPDATE OF state ON cobro.payment_attempts
    FOR EACH ROW WHEN (OLD.state = 'PENDIENTE' AND NEW.state = 'EN_PROCESO' AND NEW.kind <> 'refund')
    EXECUTE FUNCTION cobro.first_send_gate();

-- A duplicate's refund returns another charge's money: only one an open
-- double_charge case of the order lists as approved, at most its amount.
CREATE FUNCTION cobro.guard_duplicate_refund() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM cobro.recon_cases c,
               jsonb_array_elements(CASE WHEN jsonb_typeof(c.details -> 'gateway') = 'array'
                                         THEN c.details -> 'gateway' ELSE '[]'::jsonb END) g
         WHERE c.kind = 'double_charge' AND c.resolved_at IS NULL
           AND c.order_id = NEW.order_id
           AND g ->> 'id' = NEW.refund_of_gateway
           AND g ->> 'status' = 'approved'
           AND g ->> 'order_id' = NEW.order_id
           AND g ->> 'currency' = NEW.currency
           AND jsonb_typeof(g -> 'amount_minor') = 'number'
           AND (g ->> 'amount_minor')::numeric >= NEW.amount_minor) THEN
        RAISE EXCEPTION 'gateway charge % is not an approved charge of at least % listed by an open double_charge case of order %: only such a duplicate is refunded this way',
            NEW.refund_of_gateway, cobro.major(NEW.amount_minor, NEW.currency), NEW.order_id
            USING ERRCODE = 'CB007';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER guard_duplicate_refund
    BEFORE INSERT ON cobro.payment_attempts
    FOR EACH ROW WHEN (NEW.refund_of_gateway IS NOT NULL)
    EXECUTE FUNCTION cobro.guard_duplicate_refund();

CREATE FUNCTION cobro.cancel_reason_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'attempt % was cancelled (%): a cancel is never undone or reworded, only made one that holds the order',
        OLD.id, OLD.cancel_reason USING ERRCODE = 'CB020';
END;
$$;
CREATE TRIGGER cancel_reason_once
    BEFORE UPDATE OF cancel_reason ON cobro.payment_attempts
    FOR EACH ROW WHEN (OLD.cancel_reason IS NOT NULL
                       AND OLD.cancel_reason IS DISTINCT FROM NEW.cancel_reason
                       AND NOT (NOT cobro.cancel_holds_order(OLD.cancel_reason)
                                AND coalesce(cobro.cancel_holds_order(NEW.cancel_reason), false)))
    EXECUTE FUNCTION cobro.cancel_reason_once();
