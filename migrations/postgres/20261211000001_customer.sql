-- Customers: a charge may name the gateway's customer its saved payment
-- method belongs to (Stripe refuses a PaymentIntent for a PaymentMethod
-- attached to a Customer unless `customer` is given, so an off-session
-- retry of a saved card needs it).
--
-- 1. payment_attempts.customer: nullable, an opaque token under the
--    payment method's rule (1-255 characters of A-Z a-z 0-9 _ - . : with
--    fewer than 12 digits: never card data), held by a CHECK.
-- 2. cobro.customer_problem(text): that rule with the Rust parser's
--    reasons (src/domain: Customer::parse); charge_input_problem checks
--    it last, as 'invalid customer: <reason>'. It gains p_customer (last,
--    default NULL), so its five-argument callers are unchanged.
-- 3. cobro.enqueue_charge gains p_customer (last, after p_actor, default
--    NULL): every existing call, positional or named, means what it did.
--    The same key with another customer is a different charge (CB409),
--    as with another payment method. The body is otherwise
--    …_amounts_in_major_units.sql's.
-- 4. cobro.business_retry carries the declined attempt's customer to the
--    retry, as it carries the payment method; otherwise
--    …_charge_gate.sql's.

ALTER TABLE cobro.payment_attempts ADD COLUMN customer text
    CONSTRAINT payment_attempts_customer_token
    CHECK (customer ~ '^[A-Za-z0-9_.:-]{1,255}$'
           AND length(regexp_replace(customer, '[^0-9]', '', 'g')) < 12);

CREATE FUNCTION cobro.customer_problem(p_customer text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN p_customer IS NULL THEN NULL
        WHEN length(p_customer) NOT BETWEEN 1 AND 255 THEN 'must be 1-255 characters'
        WHEN p_customer !~ '^[A-Za-z0-9_.:-]+$' THEN
            'must be an opaque token of letters, digits, ''_'', ''-'', ''.'', '':'''
        WHEN length(regexp_replace(p_customer, '[^0-9]', '', 'g')) >= 12 THEN
            'looks like a card number; send the gateway''s customer id instead'
    END;
$$;

DROP FUNCTION cobro.charge_input_problem(text, bigint, text, uuid, text);
CREATE FUNCTION cobro.charge_input_problem(
    p_order_id        text,
    p_amount_minor    bigint,
    p_currency        text,
    p_idempotency_key uuid DEFAULT NULL,
    p_payment_method  text DEFAULT NULL,
    p_customer        text DEFAULT NULL
) RETURNS text
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
DECLARE
    v_problem text;
BEGIN
    v_problem := cobro.order_id_problem(p_order_id);
    IF v_problem IS NOT NULL THEN
        RETURN 'invalid order_id: ' || v_problem;
    END IF;
    v_problem := cobro.amount_problem(p_amount_minor);
    IF v_problem IS NOT NULL THEN
        RETURN 'invalid amount_minor: ' || v_problem;
    END IF;
    IF p_currency IS NULL OR NOT EXISTS (SELECT 1 FROM cobro.currencies c WHERE c.code = p_currency) THEN
        RETURN format('invalid currency: unknown ISO 4217 currency code %s (use upper case, e.g. "USD")',
                      quote_nullable(p_currency));
    END IF;
    v_problem := cobro.idempotency_key_problem(p_idempotency_key);
    IF v_problem IS NOT NULL THEN
        RETURN 'invalid idempotency_key: ' || v_problem;
    END IF;
    v_problem := cobro.payment_method_problem(p_payment_method);
    IF v_problem IS NOT NULL THEN
        RETURN 'invalid payment_method: ' || v_problem;
    END IF;
    v_problem := cobro.customer_problem(p_customer);
    IF v_problem IS NOT NULL THEN
        RETURN 'invalid customer: ' || v_problem;
    END IF;
    RETURN NULL;
END;
$$;


DROP FUNCTION cobro.enqueue_charge(text, bigint, text, uuid, text, text);
CREATE FUNCTION cobro.enqueue_charge(
    p_order_id        text,
    p_amount_minor    bigint,
    p_currency        text,
    p_idempotency_key uuid DEFAULT NULL,
    p_payment_method  text DEFAULT NULL,
    p_actor           text DEFAULT 'app',
    p_customer        text DEFAULT NULL
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
                                            p_payment_method, p_customer);
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
           AND v_old.payment_method IS NOT DISTINCT FROM p_payment_method
           AND v_old.customer IS NOT DISTINCT FROM p_customer THEN
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
            (id, order_id, amount_minor, currency, payment_method, customer, idempotency_key,
             state, next_action_at)
        VALUES (v_id, p_order_id, p_amount_minor, p_currency, p_payment_method, p_customer, v_key,
                'PENDIENTE', now());
    EXCEPTION WHEN unique_violation THEN
        -- A concurrent transaction inserted first (the unique indexes are the real guard).
        SELECT * INTO v_old FROM cobro.payment_attempts a WHERE a.idempotency_key = v_key;
        IF FOUND THEN
            IF v_old.order_id = p_order_id AND v_old.amount_minor = p_amount_minor
               AND v_old.currency = p_currency
               AND v_old.payment_method IS NOT DISTINCT FROM p_payment_method
               AND v_old.customer IS NOT DISTINCT FROM p_customer THEN
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

CREATE OR REPLACE FUNCTION cobro.business_retry(
    p_attempt_id       uuid,
    p_key              uuid,
    p_max_attempts     integer,
    p_actor            text,
    p_expected_version bigint DEFAULT NULL,
    p_card_cap         integer DEFAULT NULL
) RETURNS TABLE (attempt_id uuid, idempotency_key uuid, attempt_number integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_old cobro.payment_attempts;
    v_id  uuid := gen_random_uuid();
    v_n   integer;
    v_card bigint;
    v_method text;
    v_update bigint;
    v_key uuid;
BEGIN
    SELECT * INTO v_old FROM cobro.payment_attempts a WHERE a.id = p_attempt_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no attempt with id %', p_attempt_id USING ERRCODE = 'CB404';
    END IF;
    PERFORM 1 FROM cobro.payment_attempts a WHERE a.order_id = v_old.order_id FOR UPDATE;
    SELECT * INTO v_old FROM cobro.payment_attempts a WHERE a.id = p_attempt_id;
    IF p_expected_version IS NOT NULL
       AND (v_old.version <> p_expected_version OR v_old.next_action_at IS NULL) THEN
        RAISE EXCEPTION 'the scheduled retry of attempt % was already handled', p_attempt_id
            USING ERRCODE = 'CB006';
    END IF;
    IF v_old.state <> 'RECHAZADO' THEN
        RAISE EXCEPTION 'attempt % is %, not RECHAZADO: only a declined attempt is retried',
            p_attempt_id, v_old.state USING ERRCODE = 'CB003';
    END IF;
    IF EXISTS (SELECT 1 FROM cobro.payment_attempts a
               WHERE a.order_id = v_old.order_id AND a.state = 'APROBADO') THEN
        RAISE EXCEPTION 'order % already has an approved charge', v_old.order_id USING ERRCODE = 'CB002';
    END IF;
    SELECT max(a.attempt_number) INTO v_n FROM cobro.payment_attempts a WHERE a.order_id = v_old.order_id;
    IF v_n >= p_max_attempts THEN
        RAISE EXCEPTION 'order % has had % attempts, the maximum', v_old.order_id, v_n
            USING ERRCODE = 'CB005';
    END IF;
    v_key := coalesce(p_key, cobro.retry_key(v_old.order_id, v_n + 1));
    SELECT u.id, u.payment_method INTO v_update, v_method FROM cobro.payment_method_updates u
     WHERE u.order_id = v_old.order_id ORDER BY u.id DESC LIMIT 1;
    v_method := coalesce(v_method, v_old.payment_method);
    -- The card network's cap on retries of one card (Visa: 15 in 30 days),
    -- across orders; the lock serialises retries of one payment method.
    IF p_card_cap IS NOT NULL AND p_card_cap > 0 AND v_method IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(hashtext('cobro.card_retries:' || v_method));
        SELECT count(*) INTO v_card FROM cobro.payment_attempts a
         WHERE a.payment_method = v_method AND a.kind = 'business_retry'
           AND a.created_at > now() - interval '30 days';
        IF v_card >= p_card_cap THEN
            RAISE EXCEPTION 'the payment method of order % has had % business retries in the last 30 days, the card network''s limit (COBRO_RETRY_CARD_CAP=%): no further retry',
                v_old.order_id, v_card, p_card_cap USING ERRCODE = 'CB007';
        END IF;
    END IF;
    BEGIN
        INSERT INTO cobro.payment_attempts
            (id, order_id, amount_minor, currency, payment_method, customer, idempotency_key,
             state, kind, attempt_number, next_action_at)
        VALUES (v_id, v_old.order_id, v_old.amount_minor, v_old.currency, v_method,
                v_old.customer, v_key, 'PENDIENTE', 'business_retry', v_n + 1, now());
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'order % is already being retried (another attempt is live)', v_old.order_id
            USING ERRCODE = 'CB001';
    END;
    -- The declined attempt's retry is done: clear its schedule.
    UPDATE cobro.payment_attempts a
       SET next_action_at = NULL, version = a.version + 1, updated_at = now()
     WHERE a.id = p_attempt_id;
    INSERT INTO cobro.attempt_transitions (attempt_id, from_state, to_state, cause, actor, evidence)
    VALUES (v_id, NULL, 'PENDIENTE', 'business_retry', p_actor,
            json_strip_nulls(json_build_object('retry_of', p_attempt_id,
                                               'payment_method_update', v_update)));
    PERFORM cobro.wake(v_id, now());
    RETURN QUERY SELECT v_id, v_key, v_n + 1;
END;
$$;

