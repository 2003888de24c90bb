-- Every card network's cap on business retries of one card, and finance's
-- explicit override (issue 29 item 5).
--
-- 1. cobro.check_card_caps: the caps as one small function, so the next
--    change to them is one diff (issue 30 item 4). Visa: at most
--    p_visa_30d retries of one card in 30 days; Mastercard: at most
--    p_mc_24h in 24 hours and p_mc_30d in 30 days. Each network's caps
--    apply to its own cards, by the brand cobro.card_brand finds; a card
--    whose brand is unknown (never reported, or another network) gets
--    every cap, the strictest choice (a wrong guess only retries less).
--    Refused with CB007, naming the cap, its setting, and the override.
--    cobro.card_brand: the brand the newest transition that reported one
--    says (the transition log's evidence `card_brand`, allow-listed by
--    cobro before it is written), among the attempts charged to that
--    payment method; NULL when no answer ever said it. No new column.
-- 2. cobro.retry_cap_override: the reason finance recorded with its newest
--    request to retry a declined attempt (the append-only log's
--    `retry_requested` row with error_kind `cap_override`), or NULL.
-- 3. cobro.check_retry_caps: the caps for the retry a request would create
--    (the order's newest payment-method update, else the declined one's).
-- 4. cobro.business_retry takes the Mastercard caps and skips the caps
--    only when finance recorded an override; the new attempt's log row
--    carries the reason. The old six-argument function is dropped (its
--    return type changes: it also returns the override).

CREATE INDEX payment_attempts_method ON cobro.payment_attempts (payment_method)
    WHERE payment_method IS NOT NULL;

CREATE FUNCTION cobro.card_brand(p_method text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT lower(t.evidence->>'card_brand')
      FROM cobro.payment_attempts a
      JOIN cobro.attempt_transitions t ON t.attempt_id = a.id
     WHERE a.payment_method = p_method
       AND t.evidence->>'card_brand' IS NOT NULL
     ORDER BY t.id DESC LIMIT 1
$$;

CREATE FUNCTION cobro.check_card_caps(
    p_method   text,
    p_order    text,
    p_visa_30d integer,
    p_mc_24h   integer,
    p_mc_30d   integer
) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_day   bigint;
    v_month bigint;
    v_brand text;
    v_all   text := '';
    v_how   constant text := 'finance may override it with a reason (finance API: POST /finance/api/attempts/<id>/retry with {"override_reason": "..."}; CLI: cobro retry --override-reason)';
BEGIN
    IF p_method IS NULL THEN
        RETURN;
    END IF;
    -- Serialises retries of one payment method (count, then insert).
    PERFORM pg_advisory_xact_lock(hashtext('cobro.card_retries:' || p_method));
    v_brand := cobro.card_brand(p_method);
    -- Only the card's own network's caps; an unknown brand gets them all.
    IF v_brand = 'visa' THEN
        p_mc_24h := NULL;
        p_mc_30d := NULL;
    ELSIF v_brand = 'mastercard' THEN
        p_visa_30d := NULL;
    ELSE
        v_all := ' (the card''s brand is unknown: every network''s caps apply)';
    END IF;
    SELECT count(*) FILTER (WHERE a.created_at > now() - interval '24 hours'), count(*)
      INTO v_day, v_month
      FROM cobro.payment_attempts a
     WHERE a.payment_method = p_method AND a.kind = 'business_retry'
       AND a.created_at > now() - interval '30 days';
    IF p_mc_24h IS NOT NULL AND p_mc_24h > 0 AND v_day >= p_mc_24h THEN
        RAISE EXCEPTION 'the payment method of order % has had % business retries in the last 24 hours, Mastercard''s limit (COBRO_RETRY_MC_CAP_24H=%)%: no further retry; %',
            p_order, v_day, p_mc_24h, v_all, v_how USING ERRCODE = 'CB007';
    END IF;
    IF p_visa_30d IS NOT NULL AND p_visa_30d > 0 AND v_month >= p_visa_30d THEN
        RAISE EXCEPTION 'the payment method of order % has had % business retries in the last 30 days, Visa''s limit (COBRO_RETRY_CARD_CAP=%)%: no further retry; %',
            p_order, v_month, p_visa_30d, v_all, v_how USING ERRCODE = 'CB007';
    END IF;
    IF p_mc_30d IS NOT NULL AND p_mc_30d > 0 AND v_month >= p_mc_30d THEN
        RAISE EXCEPTION 'the payment method of order % has had % business retries in the last 30 days, Mastercard''s limit (COBRO_RETRY_MC_CAP_30D=%)%: no further retry; %',
            p_order, v_month, p_mc_30d, v_all, v_how USING ERRCODE = 'CB007';
    END IF;
END;
$$;

CREATE FUNCTION cobro.retry_cap_override(p_attempt_id uuid) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN t.error_kind = 'cap_override'
                     AND btrim(coalesce(t.evidence->>'detail', '')) <> ''
                THEN t.evidence->>'detail' END
      FROM cobro.attempt_transitions t
     WHERE t.attempt_id = p_attempt_id AND t.cause = 'retry_requested'
     ORDER BY t.id DESC LIMIT 1
$$;

CREATE FUNCTION cobro.check_retry_caps(
    p_attempt_id uuid,
    p_visa_30d   integer,
    p_mc_24h     integer,
    p_mc_30d     integer
) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_old    cobro.payment_attempts;
    v_method text;
BEGIN
    SELECT * INTO v_old FROM cobro.payment_attempts a WHERE a.id = p_attempt_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no attempt with id %', p_attempt_id USING ERRCODE = 'CB404';
    END IF;
    SELECT u.payment_method INTO v_method FROM cobro.payment_method_updates u
     WHERE u.order_id = v_old.order_id ORDER BY u.id DESC LIMIT 1;
    PERFORM cobro.check_card_caps(coalesce(v_method, v_old.payment_method), v_old.order_id,
                                  p_visa_30d, p_mc_24h, p_mc_30d);
END;
$$;

DROP FUNCTION cobro.business_retry(uuid, uuid, integer, text, bigint, integer);

CREATE FUNCTION cobro.business_retry(
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
    -- The card networks' caps on retries of one card, across orders,
    -- unless finance recorded an override with its reason.
    v_override := cobro.retry_cap_override(p_attempt_id);
    IF v_override IS NULL THEN
        PERFORM cobro.check_card_caps(v_method, v_old.order_id, p_card_cap, p_mc_cap_24h, p_mc_cap_30d);
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
            json_strip_nulls(json_build_object(
                'retry_of', p_attempt_id,
                'payment_method_update', v_update,
                'cap_override', v_override,
                'detail', CASE WHEN v_override IS NOT NULL
                               THEN 'card-network caps overridden by finance: ' || v_override END)));
    PERFORM cobro.wake(v_id, now());
    RETURN QUERY SELECT v_id, v_key, v_n + 1, v_override;
END;
$$;
