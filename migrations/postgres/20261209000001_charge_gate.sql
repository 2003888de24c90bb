-- Money at every door: the rules every path that creates an attempt or
-- moves a state passes through, held here so that no door (the SQL
-- functions, the Rust store, POST /charges, the CLI, finance, webhooks, a
-- psql session, a door not yet written) can go around them.
--
-- 1. cobro.settings: one row of limits every door reads (the maximum
--    amount) and the deployment's key namespace. `cobro migrate` creates it
--    with the defaults and `cobro migrate --max-amount-minor N` (or
--    COBRO_MAX_AMOUNT_MINOR at migrate time) sets the maximum.
-- 2. cobro.charge_gate(): BEFORE INSERT on payment_attempts. Every attempt:
--    amount_minor at most settings.max_amount_minor (22023, "invalid
--    amount_minor: ..."). Every charge attempt (kind <> 'refund'), the one
--    rule for "may this order get a new charge attempt": refused while the
--    order has an approved charge (CB002), a live or in-doubt attempt
--    (CB001: PENDIENTE, EN_PROCESO, DESCONOCIDO, EN_REVISION), an open case
--    saying the gateway may have charged it (CB011: every case kind but the
--    harmless ones of cobro.case_kind_holds_order), or a cancel whose reason
--    means "do not charge this order" (CB012: cobro.cancel_holds_order).
--    A case's hold is lifted only by resolving the case (resolved_at, by
--    whom, a note). The order's advisory lock serialises the check with
--    every other writer that takes it (cancels take it too).
-- 3. cobro.state_moves and cobro.hold_settled_states(): an update that
--    changes an attempt's state must be a move of src/state.rs's machine
--    (tests/settled_states.rs keeps the table equal to state::transition);
--    nothing leaves APROBADO or RECHAZADO (CB020).
-- 4. cobro.retry_key(order, attempt_number): the key cobro makes for a
--    business retry, derived from the deployment's namespace, the order
--    and the attempt number (a name-based UUID, version 8 over SHA-256,
--    RFC 9562 B.2; src/domain/key.rs computes the same). A retry created
--    again after a failover that lost its row carries the same key, and
--    the gateway deduplicates it. cobro.business_retry derives it when
--    p_key is NULL (the only change to that function; its body is
--    otherwise …_payment_method_update.sql's).

CREATE TABLE cobro.settings (
    only_row         boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    max_amount_minor bigint NOT NULL DEFAULT 99999999
                     CHECK (max_amount_minor BETWEEN 1 AND 999999999999),
    key_namespace    uuid NOT NULL DEFAULT gen_random_uuid(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
INSERT INTO cobro.settings DEFAULT VALUES;
CREATE TRIGGER settings_keep_the_row
    BEFORE DELETE ON cobro.settings
    FOR EACH ROW EXECUTE FUNCTION cobro.refuse_change();
CREATE TRIGGER settings_no_truncate
    BEFORE TRUNCATE ON cobro.settings
    FOR EACH STATEMENT EXECUTE FUNCTION cobro.refuse_change();
CREATE FUNCTION cobro.refuse_namespace_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'cobro.settings.key_namespace never changes: business-retry keys are derived from it'
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
CREATE TRIGGER settings_namespace_fixed
    BEFORE UPDATE ON cobro.settings
    FOR EACH ROW WHEN (OLD.key_namespace IS DISTINCT FROM NEW.key_namespace)
    EXECUTE FUNCTION cobro.refuse_namespace_change();

-- 9.99 USD for (999, 'USD'): a message's amount in major units, exactly
-- (numeric, never float).
CREATE FUNCTION cobro.major(p_amount_minor bigint, p_currency text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT round(p_amount_minor::numeric / (10::numeric ^ c.minor_unit), c.minor_unit)::text
           || ' ' || c.code
      FROM cobro.currencies c WHERE c.code = p_currency;
$$;

-- Which cancel reasons mean "do not charge this order" (src/store/cancel.rs
-- CancelReason::holds_order says the same; a test compares them).
CREATE FUNCTION cobro.cancel_holds_order(p_reason text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_reason IN ('paid_by_other_means', 'fraud_suspected', 'duplicate_order');
$$;

-- Which open cases hold the order: every kind but those explicitly
-- harmless. missing_at_gateway says the gateway did NOT charge what we
-- hold approved (and the approved attempt refuses new ones anyway). A kind
-- added later holds until it is added here.
CREATE FUNCTION cobro.case_kind_holds_order(p_kind text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_kind NOT IN ('missing_at_gateway');
$$;

CREATE INDEX recon_cases_open_order ON cobro.recon_cases (order_id)
    WHERE resolved_at IS NULL;

-- Serialises everything that decides about one order's charge attempts.
CREATE FUNCTION cobro.lock_order(p_order_id text) RETURNS void
LANGUAGE sql AS $$
    SELECT pg_advisory_xact_lock(hashtext('cobro.order'), hashtext(p_order_id));
$$;

CREATE FUNCTION cobro.charge_gate() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_max   bigint;
    v_id    uuid;
    v_state text;
    v_case  bigint;
    v_kind  text;
BEGIN
    SELECT s.max_amount_minor INTO v_max FROM cobro.settings s;
    IF NEW.amount_minor > v_max THEN
        RAISE EXCEPTION 'invalid amount_minor: must be at most % minor units (%), the maximum in cobro.settings (set by `cobro migrate --max-amount-minor` or COBRO_MAX_AMOUNT_MINOR), got %',
            v_max, cobro.major(v_max, NEW.currency), NEW.amount_minor
            USING ERRCODE = '22023';
    END IF;
    IF NEW.kind = 'refund' THEN
        RETURN NEW;
    END IF;
    PERFORM cobro.lock_order(NEW.order_id);
    -- Each statement below reads what is committed after the lock.
    SELECT a.id INTO v_id FROM cobro.payment_attempts a
     WHERE a.order_id = NEW.order_id AND a.kind <> 'refund' AND a.state = 'APROBADO' LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'order % already has an approved charge (attempt %): no new charge attempt',
            NEW.order_id, v_id USING ERRCODE = 'CB002';
    END IF;
    SELECT a.id, a.state INTO v_id, v_state FROM cobro.payment_attempts a
     WHERE a.order_id = NEW.order_id AND a.kind <> 'refund'
       AND a.state IN ('PENDIENTE', 'EN_PROCESO', 'DESCONOCIDO', 'EN_REVISION') LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'order % already has a live attempt (% is %): no new charge attempt until it settles',
            NEW.order_id, v_id, v_state USING ERRCODE = 'CB001';
    END IF;
    SELECT c.id, c.kind INTO v_case, v_kind FROM cobro.recon_cases c
     WHERE c.order_id = NEW.order_id AND c.resolved_at IS NULL
       AND cobro.case_kind_holds_order(c.kind)
     ORDER BY c.id LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'order % has an open % case (#%): the gateway may have charged it, so no new charge attempt until finance resolves the case (cobro escalations resolve-case --case % --by <you> --note <what was done>)',
            NEW.order_id, v_kind, v_case, v_case USING ERRCODE = 'CB011';
    END IF;
    SELECT a.cancel_reason INTO v_kind FROM cobro.payment_attempts a
     WHERE a.order_id = NEW.order_id AND a.kind <> 'refund'
       AND cobro.cancel_holds_order(a.cancel_reason) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'order % was cancelled (%): it must not be charged; charge a new order instead',
            NEW.order_id, v_kind USING ERRCODE = 'CB012';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER charge_gate
    BEFORE INSERT ON cobro.payment_attempts
    FOR EACH ROW EXECUTE FUNCTION cobro.charge_gate();

-- The moves between two different states that src/state.rs's transition()
-- makes (same-state writes, such as a cancel dropping a RECHAZADO
-- attempt's scheduled retry, are not moves).
CREATE TABLE cobro.state_moves (
    from_state text NOT NULL,
    to_state   text NOT NULL,
    PRIMARY KEY (from_state, to_state)
);
INSERT INTO cobro.state_moves (from_state, to_state) VALUES
    ('PENDIENTE',   'EN_PROCESO'),
    ('PENDIENTE',   'APROBADO'),
    ('PENDIENTE',   'RECHAZADO'),
    ('PENDIENTE',   'EN_REVISION'),
    ('EN_PROCESO',  'PENDIENTE'),
    ('EN_PROCESO',  'DESCONOCIDO'),
    ('EN_PROCESO',  'APROBADO'),
    ('EN_PROCESO',  'RECHAZADO'),
    ('EN_PROCESO',  'EN_REVISION'),
    ('DESCONOCIDO', 'EN_PROCESO'),
    ('DESCONOCIDO', 'APROBADO'),
    ('DESCONOCIDO', 'RECHAZADO'),
    ('DESCONOCIDO', 'EN_REVISION'),
    ('EN_REVISION', 'DESCONOCIDO'),
    ('EN_REVISION', 'APROBADO'),
    ('EN_REVISION', 'RECHAZADO');
CREATE TRIGGER state_moves_fixed
    BEFORE INSERT OR UPDATE OR DELETE ON cobro.state_moves
    FOR EACH ROW EXECUTE FUNCTION cobro.refuse_change();

CREATE FUNCTION cobro.hold_settled_states() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM cobro.state_moves m
                    WHERE m.from_state = OLD.state AND m.to_state = NEW.state) THEN
        RAISE EXCEPTION 'attempt % cannot move from % to %: %', OLD.id, OLD.state, NEW.state,
            CASE WHEN OLD.state IN ('APROBADO', 'RECHAZADO')
                 THEN 'a settled attempt stays settled (a contradiction opens a case for finance)'
                 ELSE 'not a move of the state machine (src/state.rs)' END
            USING ERRCODE = 'CB020';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER hold_settled_states
    BEFORE UPDATE OF state ON cobro.payment_attempts
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION cobro.hold_settled_states();

-- The key of an order's business retry number p_attempt_number: version 8,
-- the first 16 bytes of SHA-256(namespace || 'cobro.business_retry:' ||
-- order || ':' || number), version and variant bits set.
CREATE FUNCTION cobro.retry_key(p_order_id text, p_attempt_number integer) RETURNS uuid
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_ns  uuid;
    v_h   bytea;
BEGIN
    SELECT s.key_namespace INTO v_ns FROM cobro.settings s;
    v_h := substring(sha256(uuid_send(v_ns)
                            || convert_to('cobro.business_retry:' || p_order_id || ':'
                                          || p_attempt_number::text, 'UTF8')) FROM 1 FOR 16);
    v_h := set_byte(v_h, 6, (get_byte(v_h, 6) & 15) | 128);
    v_h := set_byte(v_h, 8, (get_byte(v_h, 8) & 63) | 128);
    RETURN encode(v_h, 'hex')::uuid;
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
            (id, order_id, amount_minor, currency, payment_method, idempotency_key, state,
             kind, attempt_number, next_action_at)
        VALUES (v_id, v_old.order_id, v_old.amount_minor, v_old.currency, v_method,
                v_key, 'PENDIENTE', 'business_retry', v_n + 1, now());
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

-- 5. A refund that fails after it looked settled (Stripe: refund.updated
--    with status failed on a refund we hold APROBADO) keeps its state
--    (settled states stay settled) and is marked refund_failed_at, once,
--    with a transition-log row; a case opens for finance. Its amount is
--    free to refund again: cobro.guard_refund and the duplicate's unique
--    index leave it out. guard_refund is …_duplicate_refund.sql's but for
--    that one condition (AND a.refund_failed_at IS NULL).
ALTER TABLE cobro.payment_attempts ADD COLUMN refund_failed_at timestamptz
    CHECK (refund_failed_at IS NULL OR (kind = 'refund' AND state = 'APROBADO'));
CREATE FUNCTION cobro.refund_failed_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'refund % failed at the gateway at %: that is never undone',
        OLD.id, OLD.refund_failed_at USING ERRCODE = 'insufficient_privilege';
END;
$$;
CREATE TRIGGER refund_failed_once
    BEFORE UPDATE ON cobro.payment_attempts
    FOR EACH ROW WHEN (OLD.refund_failed_at IS NOT NULL
                       AND OLD.refund_failed_at IS DISTINCT FROM NEW.refund_failed_at)
    EXECUTE FUNCTION cobro.refund_failed_once();
DROP INDEX cobro.one_refund_per_duplicate;
CREATE UNIQUE INDEX one_refund_per_duplicate ON cobro.payment_attempts (refund_of_gateway)
    WHERE refund_of_gateway IS NOT NULL AND state <> 'RECHAZADO' AND refund_failed_at IS NULL;

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
        RAISE EXCEPTION 'refund of % % exceeds what is left to refund of attempt %: % of % already refunded or in flight',
            NEW.amount_minor, NEW.currency, v_charge.id, v_refunded, v_charge.amount_minor
            USING ERRCODE = 'CB008';
    END IF;
    RETURN NEW;
END;
$$;
