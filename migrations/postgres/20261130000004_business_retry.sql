-- Business retries: a NEW attempt with a NEW key for an order whose latest
-- attempt was declined. The guard is the database's: the order's attempts
-- are locked (so an approval committing meanwhile is seen), an approved
-- order is refused, and the partial unique index one_live_attempt_per_order
-- refuses a second live attempt: of two retries racing for one order, one
-- commits and the other fails on that constraint (SQLSTATE CB001).
--
-- Errors: CB404 no such attempt, CB003 the attempt is not RECHAZADO,
-- CB002 the order has an approved attempt, CB001 already being retried (or
-- another attempt is live: DESCONOCIDO, EN_REVISION, ...), CB005 the order
-- has had its maximum number of attempts, CB006 the scheduled retry this
-- call was made for was already handled (p_expected_version: the version
-- the scheduler saw; NULL for a manual retry by finance).
CREATE FUNCTION cobro.business_retry(
    p_attempt_id       uuid,
    p_key              uuid,
    p_max_attempts     integer,
    p_actor            text,
    p_expected_version bigint DEFAULT NULL
) RETURNS TABLE (attempt_id uuid, idempotency_key uuid, attempt_number integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_old cobro.payment_attempts;
    v_id  uuid := gen_random_uuid();
    v_n   integer;
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
