-- A new payment-method token from the app for the next business retry of a
-- declined order (the customer updated their card after a notice).
--
-- The rule: accepted only while the order's latest charge attempt is
-- RECHAZADO (not cancelled) with a business retry pending (scheduled, or
-- parked until the gateway answers), and nothing of the order is approved.
-- The next business retry of the order (scheduled or finance's) charges the
-- newest token; every later one keeps it (it copies the declined attempt's).
-- Each change is an append-only row saying who gave it, after which attempt.
--
-- Errors: 22023 invalid payment_method (the same rule as enqueue_charge:
-- an opaque token, never card data), CB404 no such order, CB002 the order
-- has an approved charge, CB010 no business retry pending.
CREATE TABLE cobro.payment_method_updates (
    id               bigserial PRIMARY KEY,
    order_id         text NOT NULL,
    -- the declined attempt whose pending retry will use the token
    after_attempt_id uuid NOT NULL REFERENCES cobro.payment_attempts (id),
    payment_method   text NOT NULL CHECK (cobro.payment_method_problem(payment_method) IS NULL),
    actor            text NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX payment_method_updates_order ON cobro.payment_method_updates (order_id, id);
CREATE TRIGGER payment_method_updates_append_only
    BEFORE UPDATE OR DELETE ON cobro.payment_method_updates
    FOR EACH ROW EXECUTE FUNCTION cobro.refuse_change();
CREATE TRIGGER payment_method_updates_no_truncate
    BEFORE TRUNCATE ON cobro.payment_method_updates
    FOR EACH STATEMENT EXECUTE FUNCTION cobro.refuse_change();
REVOKE UPDATE, DELETE, TRUNCATE ON cobro.payment_method_updates FROM PUBLIC;

CREATE FUNCTION cobro.update_payment_method(
    p_order_id       text,
    p_payment_method text,
    p_actor          text
) RETURNS TABLE (update_id bigint, after_attempt_id uuid, next_retry_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v_problem text := coalesce(cobro.payment_method_problem(p_payment_method),
                               CASE WHEN p_payment_method IS NULL THEN 'is required' END);
    v_last cobro.payment_attempts;
    v_id   bigint;
BEGIN
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION 'invalid payment_method: %', v_problem USING ERRCODE = '22023';
    END IF;
    -- The same lock as cobro.business_retry: a retry and an update of one
    -- order take turns, so the retry sees the update or the update sees
    -- the retry (and is refused).
    PERFORM 1 FROM cobro.payment_attempts a WHERE a.order_id = p_order_id FOR UPDATE;
    SELECT * INTO v_last FROM cobro.payment_attempts a
     WHERE a.order_id = p_order_id AND a.kind <> 'refund'
     ORDER BY a.attempt_number DESC, a.created_at DESC LIMIT 1;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'order % has no attempts', p_order_id USING ERRCODE = 'CB404';
    END IF;
    IF EXISTS (SELECT 1 FROM cobro.payment_attempts a
               WHERE a.order_id = p_order_id AND a.state = 'APROBADO' AND a.kind <> 'refund') THEN
        RAISE EXCEPTION 'order % already has an approved charge: no retry will charge it', p_order_id
            USING ERRCODE = 'CB002';
    END IF;
    IF v_last.state <> 'RECHAZADO' OR v_last.cancel_reason IS NOT NULL
       OR (v_last.next_action_at IS NULL AND v_last.parked_since IS NULL) THEN
        RAISE EXCEPTION 'order %: its latest attempt % is % with no business retry pending; a new payment method is accepted only for the next scheduled retry of a declined order',
            p_order_id, v_last.id,
            CASE WHEN v_last.cancel_reason IS NOT NULL THEN 'cancelled' ELSE v_last.state END
            USING ERRCODE = 'CB010';
    END IF;
    INSERT INTO cobro.payment_method_updates (order_id, after_attempt_id, payment_method, actor)
    VALUES (p_order_id, v_last.id, p_payment_method, p_actor)
    RETURNING id INTO v_id;
    RETURN QUERY SELECT v_id, v_last.id, v_last.next_action_at;
END;
$$;

-- cobro.business_retry, charging the order's newest payment-method update
-- when there is one (otherwise the declined attempt's token, as before);
-- the card cap counts that token's retries. Same signature, same errors.
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
            (id, order_id, amount_minor, currency, payment_method, idempotency_key, state,
             kind, attempt_number, next_action_at)
        VALUES (v_id, v_old.order_id, v_old.amount_minor, v_old.currency, v_method,
                p_key, 'PENDIENTE', 'business_retry', v_n + 1, now());
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
    RETURN QUERY SELECT v_id, p_key, v_n + 1;
END;
$$;
