-- Business retries capped per payment method (the card network's rule:
-- Visa allows at most 15 retries of one card in 30 days), across orders:
-- cobro.business_retry takes the cap (NULL: none) and refuses the next
-- retry with CB007. The old five-argument function is replaced.
CREATE INDEX payment_attempts_card_retries ON cobro.payment_attempts (payment_method, created_at)
    WHERE kind = 'business_retry';
DROP FUNCTION cobro.business_retry(uuid, uuid, integer, text, bigint);
CREATE FUNCTION cobro.business_retry(
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
    -- The card network's cap on retries of one card (Visa: 15 in 30 days),
    -- across orders; the lock serialises retries of one payment method.
    IF p_card_cap IS NOT NULL AND p_card_cap > 0 AND v_old.payment_method IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(hashtext('cobro.card_retries:' || v_old.payment_method));
        SELECT count(*) INTO v_card FROM cobro.payment_attempts a
         WHERE a.payment_method = v_old.payment_method AND a.kind = 'business_retry'
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
        VALUES (v_id, v_old.order_id, v_old.amount_minor, v_old.currency, v_old.payment_method,
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
            json_build_object('retry_of', p_attempt_id));
    PERFORM cobro.wake(v_id, now());
    RETURN QUERY SELECT v_id, p_key, v_n + 1;
END;
$$;
