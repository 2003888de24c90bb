-- Amounts in messages in major units with the currency ("7.00 USD", not
-- "700 USD" for amount_minor 700): enqueue_charge's refusal of a reused key
-- printed the stored amount_minor as if it were major, and so did the
-- refund guard's "refund of 700 USD exceeds what is left". The functions
-- are those of 20261201000001_same_rules.sql and
-- 20261209000001_charge_gate.sql with those messages through cobro.major
-- (20261209000001_charge_gate.sql); nothing else changes.

CREATE OR REPLACE FUNCTION cobro.enqueue_charge(
    p_order_id        text,
    p_amount_minor    bigint,
    p_currency        text,
    p_idempotency_key uuid DEFAULT NULL,
    p_payment_method  text DEFAULT NULL,
    p_actor           text DEFAULT 'app'
) RETURNS TABLE (attempt_id uuid, idempotency_key uuid, state text, created boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_key     uuid := coalesce(p_idempotency_key, gen_random_uuid());
    v_old     cobro.payment_attempts;
    v_id      uuid := gen_random_uuid();
    v_problem text;
BEGIN
    IF p_actor IS NULL OR btrim(p_actor) = '' OR length(p_actor) > 200 OR p_actor ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'invalid actor: 1-200 characters, no control characters' USING ERRCODE = '22023';
    END IF;
    v_problem := cobro.charge_input_problem(p_order_id, p_amount_minor, p_currency, v_key,
                                            p_payment_method);
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION '%', v_problem USING ERRCODE = '22023';
    END IF;

    -- Serialise with every other writer of this order's attempts: an approval
    -- committing meanwhile is seen below, never missed.
    PERFORM 1 FROM cobro.payment_attempts a WHERE a.order_id = p_order_id FOR UPDATE;

    SELECT * INTO v_old FROM cobro.payment_attempts a WHERE a.idempotency_key = v_key;
    IF FOUND THEN
        IF v_old.order_id = p_order_id AND v_old.amount_minor = p_amount_minor
           AND v_old.currency = p_currency
           AND v_old.payment_method IS NOT DISTINCT FROM p_payment_method THEN
            RETURN QUERY SELECT v_old.id, v_old.idempotency_key, v_old.state, false;
            RETURN;
        END IF;
        RAISE EXCEPTION 'idempotency_key % was already used for a different charge (order %, %)',
            v_key, v_old.order_id, cobro.major(v_old.amount_minor, v_old.currency)
            USING ERRCODE = 'CB409';
    END IF;

    IF EXISTS (SELECT 1 FROM cobro.payment_attempts a
               WHERE a.order_id = p_order_id AND a.state = 'APROBADO') THEN
        RAISE EXCEPTION 'order % already has an approved charge', p_order_id USING ERRCODE = 'CB002';
    END IF;
    IF EXISTS (SELECT 1 FROM cobro.payment_attempts a
               WHERE a.order_id = p_order_id
                 AND a.state IN ('PENDIENTE', 'EN_PROCESO', 'DESCONOCIDO', 'EN_REVISION')) THEN
        RAISE EXCEPTION 'order % already has a live attempt', p_order_id USING ERRCODE = 'CB001';
    END IF;

    BEGIN
        INSERT INTO cobro.payment_attempts
            (id, order_id, amount_minor, currency, payment_method, idempotency_key, state, next_action_at)
        VALUES (v_id, p_order_id, p_amount_minor, p_currency, p_payment_method, v_key, 'PENDIENTE', now());
    EXCEPTION WHEN unique_violation THEN
        -- A concurrent transaction inserted first (the unique indexes are the real guard).
        SELECT * INTO v_old FROM cobro.payment_attempts a WHERE a.idempotency_key = v_key;
        IF FOUND THEN
            IF v_old.order_id = p_order_id AND v_old.amount_minor = p_amount_minor
               AND v_old.currency = p_currency
               AND v_old.payment_method IS NOT DISTINCT FROM p_payment_method THEN
                RETURN QUERY SELECT v_old.id, v_old.idempotency_key, v_old.state, false;
                RETURN;
            END IF;
            RAISE EXCEPTION 'idempotency_key % was already used for a different charge', v_key
                USING ERRCODE = 'CB409';
        END IF;
        RAISE EXCEPTION 'order % already has a live attempt', p_order_id USING ERRCODE = 'CB001';
    END;

    INSERT INTO cobro.attempt_transitions (attempt_id, from_state, to_state, cause, actor)
    VALUES (v_id, NULL, 'PENDIENTE', 'enqueued', p_actor);
    PERFORM cobro.wake(v_id, now());

    RETURN QUERY SELECT v_id, v_key, 'PENDIENTE'::text, true;
END;
$$;

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
       AND a.refund_of_gateway IS NULL AND a.refund_failed_at IS NULL;
    IF v_refunded + NEW.amount_minor > v_charge.amount_minor THEN
        RAISE EXCEPTION 'refund of % exceeds what is left to refund of attempt %: % of % already refunded or in flight',
            cobro.major(NEW.amount_minor, NEW.currency), v_charge.id,
            cobro.major(v_refunded, v_charge.currency),
            cobro.major(v_charge.amount_minor, v_charge.currency)
            USING ERRCODE = 'CB008';
    END IF;
    RETURN NEW;
END;
$$;

