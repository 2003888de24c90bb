-- The ceiling on amount_minor: 999,999,999,999 (10^12 - 1) minor units,
-- 9,999,999,999.99 in a 2-decimal currency (src/domain.rs AMOUNT_CEILING;
-- a test keeps the two equal). Whoever writes, nothing above it is stored,
-- so no amount (and no realistic sum of amounts) comes near bigint's range.
-- Entry points refuse lower amounts still (COBRO_MAX_AMOUNT_MINOR).
--
-- An existing attempt above the ceiling stops this migration: the CHECK
-- below is validated against every row, and the DO block says which.

DO $$
DECLARE
    v_over bigint;
BEGIN
    SELECT count(*) INTO v_over FROM cobro.payment_attempts WHERE amount_minor > 999999999999;
    IF v_over > 0 THEN
        RAISE EXCEPTION '% attempt(s) in cobro.payment_attempts have amount_minor above the ceiling 999999999999; resolve them before migrating',
            v_over;
    END IF;
END;
$$;

ALTER TABLE cobro.payment_attempts ADD CONSTRAINT payment_attempts_amount_minor_ceiling
    CHECK (amount_minor <= 999999999999);

-- The SQL functions refuse an amount above the ceiling like their other
-- bad input: SQLSTATE 22023, "invalid amount_minor: ...". Both are
-- otherwise unchanged from …_enqueue.sql and …_refunds.sql, but for
-- enqueue_charge's actor below.

-- enqueue_charge also takes who enqueues (`p_actor`, default 'app'), kept
-- in the attempt's first transition-log row: `api:<key name>` for POST
-- /charges. A new last parameter, so the five-parameter function is dropped
-- first (two overloads with defaults would make a three-argument call
-- ambiguous).

DROP FUNCTION cobro.enqueue_charge(text, bigint, text, uuid, text);

CREATE FUNCTION cobro.enqueue_charge(
    p_order_id        text,
    p_amount_minor    bigint,
    p_currency        text,
    p_idempotency_key uuid DEFAULT NULL,
    p_payment_method  text DEFAULT NULL,
    p_actor           text DEFAULT 'app'
) RETURNS TABLE (attempt_id uuid, idempotency_key uuid, state text, created boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_key uuid := coalesce(p_idempotency_key, gen_random_uuid());
    v_old cobro.payment_attempts;
    v_id  uuid := gen_random_uuid();
BEGIN
    IF p_actor IS NULL OR btrim(p_actor) = '' OR length(p_actor) > 200 OR p_actor ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'invalid actor: 1-200 characters, no control characters' USING ERRCODE = '22023';
    END IF;
    IF p_order_id IS NULL OR btrim(p_order_id) = '' THEN
        RAISE EXCEPTION 'invalid order_id: must not be empty' USING ERRCODE = '22023';
    END IF;
    IF btrim(p_order_id) <> p_order_id OR length(p_order_id) > 200 OR p_order_id ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'invalid order_id: 1-200 characters, no control characters, no surrounding blanks'
            USING ERRCODE = '22023';
    END IF;
    IF p_amount_minor IS NULL OR p_amount_minor <= 0 THEN
        RAISE EXCEPTION 'invalid amount_minor: must be a positive whole number of minor units, got %',
            p_amount_minor USING ERRCODE = '22023';
    END IF;
    IF p_amount_minor > 999999999999 THEN
        RAISE EXCEPTION 'invalid amount_minor: must be at most 999999999999 minor units (set by the ceiling the database enforces), got %',
            p_amount_minor USING ERRCODE = '22023';
    END IF;
    IF p_currency IS NULL OR NOT EXISTS (SELECT 1 FROM cobro.currencies c WHERE c.code = p_currency) THEN
        RAISE EXCEPTION 'invalid currency: unknown ISO 4217 currency code %', quote_nullable(p_currency)
            USING ERRCODE = '22023';
    END IF;
    IF v_key = '00000000-0000-0000-0000-000000000000'::uuid THEN
        RAISE EXCEPTION 'invalid idempotency_key: must not be the nil UUID' USING ERRCODE = '22023';
    END IF;
    IF p_payment_method IS NOT NULL AND (
        p_payment_method !~ '^[A-Za-z0-9_.:-]{1,255}$'
        OR length(regexp_replace(p_payment_method, '[^0-9]', '', 'g')) >= 12) THEN
        RAISE EXCEPTION 'invalid payment_method: must be an opaque gateway token, never card data'
            USING ERRCODE = '22023';
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
        RAISE EXCEPTION 'idempotency_key % was already used for a different charge (order %, % %)',
            v_key, v_old.order_id, v_old.amount_minor, v_old.currency USING ERRCODE = 'CB409';
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

CREATE OR REPLACE FUNCTION cobro.request_refund(
    p_attempt_id   uuid,
    p_amount_minor bigint,
    p_key          uuid DEFAULT NULL,
    p_actor        text DEFAULT 'app'
) RETURNS TABLE (refund_id uuid, idempotency_key uuid, state text, created boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_key    uuid := coalesce(p_key, gen_random_uuid());
    v_charge cobro.payment_attempts;
    v_old    cobro.payment_attempts;
    v_id     uuid := gen_random_uuid();
BEGIN
    IF p_amount_minor IS NULL OR p_amount_minor <= 0 THEN
        RAISE EXCEPTION 'invalid amount_minor: must be a positive whole number of minor units, got %',
            p_amount_minor USING ERRCODE = '22023';
    END IF;
    IF p_amount_minor > 999999999999 THEN
        RAISE EXCEPTION 'invalid amount_minor: must be at most 999999999999 minor units (set by the ceiling the database enforces), got %',
            p_amount_minor USING ERRCODE = '22023';
    END IF;
    IF v_key = '00000000-0000-0000-0000-000000000000'::uuid THEN
        RAISE EXCEPTION 'invalid idempotency_key: must not be the nil UUID' USING ERRCODE = '22023';
    END IF;
    -- Serialise with every other refund of this charge (the trigger locks it too).
    SELECT * INTO v_charge FROM cobro.payment_attempts a WHERE a.id = p_attempt_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no attempt with id %', p_attempt_id USING ERRCODE = 'CB404';
    END IF;

    SELECT * INTO v_old FROM cobro.payment_attempts a WHERE a.idempotency_key = v_key;
    IF FOUND THEN
        IF v_old.refund_of IS NOT DISTINCT FROM p_attempt_id AND v_old.amount_minor = p_amount_minor THEN
            RETURN QUERY SELECT v_old.id, v_old.idempotency_key, v_old.state, false;
            RETURN;
        END IF;
        RAISE EXCEPTION 'idempotency_key % was already used for something else', v_key
            USING ERRCODE = 'CB409';
    END IF;

    BEGIN
        INSERT INTO cobro.payment_attempts
            (id, order_id, amount_minor, currency, idempotency_key, state, kind, refund_of,
             next_action_at)
        VALUES (v_id, v_charge.order_id, p_amount_minor, v_charge.currency, v_key, 'PENDIENTE',
                'refund', p_attempt_id, now());
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'idempotency_key % was already used for something else', v_key
            USING ERRCODE = 'CB409';
    END;
    INSERT INTO cobro.attempt_transitions (attempt_id, from_state, to_state, cause, actor, evidence)
    VALUES (v_id, NULL, 'PENDIENTE', 'refund_requested', p_actor,
            json_build_object('refund_of', p_attempt_id));
    PERFORM cobro.wake(v_id, now());
    RETURN QUERY SELECT v_id, v_key, 'PENDIENTE'::text, true;
END;
$$;
