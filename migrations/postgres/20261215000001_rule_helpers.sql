-- The three big rules are now made of small helpers, so that the next
-- change to one decision redefines that helper (a diff of a few lines),
-- not the whole rule. Until now each change was a copy: cobro.business_retry
-- was redefined whole six times (a cap, the payment-method update, the
-- retry key, the customer, the brand-aware caps), cobro.enqueue_charge four
-- times and cobro.guard_refund four times, each to change a guard or a
-- column.
--
-- The helpers, one per decision that has changed before:
--   cobro.same_charge(a, order, amount, currency, method, customer)
--       whether the attempt already holding a key is the same charge (a
--       replay answers it; anything else is CB409). A charge's new column
--       changes only this. Used twice by enqueue_charge.
--   cobro.retry_number(old, expected_version, max_attempts)
--       the checks a business retry passes before the caps (CB006, CB003,
--       CB002, CB005), and the new attempt's number.
--   cobro.retry_method(order, method) -> (update id, method)
--       the payment method a retry charges: the order's newest recorded
--       update, else the declined attempt's own.
--   cobro.insert_retry(old, id, key, number, method)
--       the retry's row: what it copies from the declined attempt (a new
--       column copied onto retries changes only this), CB001 if another
--       attempt of the order is live.
--   cobro.refunded_of(charge)
--       what counts as already refunded of a charge (refunds not declined,
--       not of a duplicate, not failed after their success).
--
-- Nothing a caller sees changes: the same signatures, the same errors
-- with the same codes and messages, in the same order. The bodies are
-- otherwise those of 20261212000001_card_caps.sql (business_retry),
-- 20261211000001_customer.sql (enqueue_charge) and
-- 20261210000001_amounts_in_major_units.sql (guard_refund).
-- tests/layers.rs fails when a later migration redefines one of the three
-- rules whole instead of a helper.

CREATE FUNCTION cobro.same_charge(
    a                cobro.payment_attempts,
    p_order_id       text,
    p_amount_minor   bigint,
    p_currency       text,
    p_payment_method text,
    p_customer       text
) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT a.order_id = p_order_id AND a.amount_minor = p_amount_minor
       AND a.currency = p_currency
       AND a.payment_method IS NOT DISTINCT FROM p_payment_method
       AND a.customer IS NOT DISTINCT FROM p_customer
$$;

CREATE OR REPLACE FUNCTION cobro.enqueue_charge(
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
        IF cobro.same_charge(v_old, p_order_id, p_amount_minor, p_currency,
                             p_payment_method, p_customer) THEN
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
            IF cobro.same_charge(v_old, p_order_id, p_amount_minor, p_currency,
                                 p_payment_method, p_customer) THEN
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

CREATE FUNCTION cobro.retry_number(
    p_old              cobro.payment_attempts,
    p_expected_version bigint,
    p_max_attempts     integer
) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_n integer;
BEGIN
    IF p_expected_version IS NOT NULL
       AND (p_old.version <> p_expected_version OR p_old.next_action_at IS NULL) THEN
        RAISE EXCEPTION 'the scheduled retry of attempt % was already handled', p_old.id
            USING ERRCODE = 'CB006';
    END IF;
    IF p_old.state <> 'RECHAZADO' THEN
        RAISE EXCEPTION 'attempt % is %, not RECHAZADO: only a declined attempt is retried',
            p_old.id, p_old.state USING ERRCODE = 'CB003';
    END IF;
    IF EXISTS (SELECT 1 FROM cobro.payment_attempts a
               WHERE a.order_id = p_old.order_id AND a.state = 'APROBADO') THEN
        RAISE EXCEPTION 'order % already has an approved charge', p_old.order_id USING ERRCODE = 'CB002';
    END IF;
    SELECT max(a.attempt_number) INTO v_n FROM cobro.payment_attempts a WHERE a.order_id = p_old.order_id;
    IF v_n >= p_max_attempts THEN
        RAISE EXCEPTION 'order % has had % attempts, the maximum', p_old.order_id, v_n
            USING ERRCODE = 'CB005';
    END IF;
    RETURN v_n + 1;
END;
$$;

CREATE FUNCTION cobro.retry_method(p_order_id text, p_method text,
                                   OUT update_id bigint, OUT method text)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    SELECT u.id, u.payment_method INTO update_id, method FROM cobro.payment_method_updates u
     WHERE u.order_id = p_order_id ORDER BY u.id DESC LIMIT 1;
    method := coalesce(method, p_method);
END;
$$;

CREATE FUNCTION cobro.insert_retry(
    p_old    cobro.payment_attempts,
    p_id     uuid,
    p_key    uuid,
    p_number integer,
    p_method text
) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cobro.payment_attempts
        (id, order_id, amount_minor, currency, payment_method, customer, idempotency_key,
         state, kind, attempt_number, next_action_at)
    VALUES (p_id, p_old.order_id, p_old.amount_minor, p_old.currency, p_method,
            p_old.customer, p_key, 'PENDIENTE', 'business_retry', p_number, now());
EXCEPTION WHEN unique_violation THEN
    RAISE EXCEPTION 'order % is already being retried (another attempt is live)', p_old.order_id
        USING ERRCODE = 'CB001';
END;
$$;

CREATE OR REPLACE FUNCTION cobro.business_retry(
    p_attempt_id       uuid,
    p_key              uuid,
    p_max_attempts     integer,
    p_actor            text,
    p_expected_version bigint DEFAULT NULL,
    p_card_cap         integer DEFAULT NULL,
    p_mc_cap_24h       integer DEFAULT NULL,
    p_mc_cap_30d       integer DEFAULT NULL
) RETURNS TABLE (attempt_id uuid, idempotency_key uuid, attempt_number integer,
                 cap_override text)
LANGUAGE plpgsql AS $$
DECLARE
    v_old cobro.payment_attempts;
    v_id  uuid := gen_random_uuid();
    v_n   integer;
    v_method text;
    v_update bigint;
    v_key uuid;
    v_override text;
BEGIN
    SELECT * INTO v_old FROM cobro.payment_attempts a WHERE a.id = p_attempt_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no attempt with id %', p_attempt_id USING ERRCODE = 'CB404';
    END IF;
    PERFORM 1 FROM cobro.payment_attempts a WHERE a.order_id = v_old.order_id FOR UPDATE;
    SELECT * INTO v_old FROM cobro.payment_attempts a WHERE a.id = p_attempt_id;
    v_n := cobro.retry_number(v_old, p_expected_version, p_max_attempts);
    v_key := coalesce(p_key, cobro.retry_key(v_old.order_id, v_n));
    SELECT m.update_id, m.method INTO v_update, v_method
      FROM cobro.retry_method(v_old.order_id, v_old.payment_method) m;
    -- The card networks' caps on retries of one card, across orders,
    -- unless finance recorded an override with its reason.
    v_override := cobro.retry_cap_override(p_attempt_id);
    IF v_override IS NULL THEN
        PERFORM cobro.check_card_caps(v_method, v_old.order_id, p_card_cap, p_mc_cap_24h, p_mc_cap_30d);
    END IF;
    PERFORM cobro.insert_retry(v_old, v_id, v_key, v_n, v_method);
    -- The declined attempt's retry is done: clear its schedule.
    UPDATE cobro.payment_attempts a
       SET next_action_at = NULL, version = a.version + 1, updated_at = now()
     WHERE a.id = p_attempt_id;
    INSERT INTO cobro.attempt_transitions (attempt_id, from_state, to_state, cause, actor, evidence)
    VALUES (v_id, NULL, 'PENDIENTE', 'business_retry', p_actor,
            json_strip_nulls(json_build_object(
                'retry_of', p_attempt_id,
                'payment_method_update', v_update,
                'cap_override', v_override,
                'detail', CASE WHEN v_override IS NOT NULL
                               THEN 'card-network caps overridden by finance: ' || v_override END)));
    PERFORM cobro.wake(v_id, now());
    RETURN QUERY SELECT v_id, v_key, v_n, v_override;
END;
$$;

CREATE FUNCTION cobro.refunded_of(p_charge_id uuid) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT coalesce(sum(a.amount_minor), 0)::bigint
      FROM cobro.payment_attempts a
     WHERE a.refund_of = p_charge_id AND a.state <> 'RECHAZADO'
       AND a.refund_of_gateway IS NULL AND a.refund_failed_at IS NULL
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
    v_refunded := cobro.refunded_of(NEW.refund_of);
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
