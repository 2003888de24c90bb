-- Refunds, protected like charges. A refund is an attempt of kind 'refund'
-- in cobro.payment_attempts: its own idempotency key, its own states (the
-- same machine: a timeout is DESCONOCIDO, looked up by key, re-sent with
-- the same key, EN_REVISION when the checks run out), its own
-- transition-log and check rows, and its own wake-up queue (cobro.refund).
-- It shares the order id and currency of the charge it refunds
-- (refund_of), and has no payment method.
--
-- Invariants enforced here, whoever writes:
--   * a refund references an APROBADO charge attempt (not a refund);
--   * the sum of a charge's refunds that have not failed (state <>
--     'RECHAZADO') never exceeds its amount: the insert trigger locks the
--     charge row, so concurrent refunds of one charge are serialised and
--     each sees the others' committed rows;
--   * the same refund key twice is one refund (the key is UNIQUE);
--   * what an attempt sends (order, amount, currency, key, kind, refund_of)
--     never changes after it is written.
--
-- cobro.request_refund errors: 22023 invalid input ("invalid <field>: ..."),
-- CB404 no such attempt, CB007 the attempt is not an APROBADO charge,
-- CB008 the refund would exceed what is left to refund, CB409 the key was
-- already used for something else.

ALTER TABLE cobro.payment_attempts DROP CONSTRAINT payment_attempts_kind_check;
ALTER TABLE cobro.payment_attempts ADD CONSTRAINT payment_attempts_kind_check
    CHECK (kind IN ('initial', 'business_retry', 'refund'));
ALTER TABLE cobro.payment_attempts
    ADD COLUMN refund_of uuid REFERENCES cobro.payment_attempts (id);
ALTER TABLE cobro.payment_attempts ADD CONSTRAINT refund_has_charge
    CHECK ((kind = 'refund') = (refund_of IS NOT NULL));
ALTER TABLE cobro.payment_attempts ADD CONSTRAINT refund_has_no_payment_method
    CHECK (kind <> 'refund' OR payment_method IS NULL);

-- The order invariants are about charges; a charge's refunds are many.
DROP INDEX cobro.one_approved_per_order;
CREATE UNIQUE INDEX one_approved_per_order ON cobro.payment_attempts (order_id)
    WHERE state = 'APROBADO' AND kind <> 'refund';
DROP INDEX cobro.one_live_attempt_per_order;
CREATE UNIQUE INDEX one_live_attempt_per_order ON cobro.payment_attempts (order_id)
    WHERE state IN ('PENDIENTE', 'EN_PROCESO', 'DESCONOCIDO', 'EN_REVISION') AND kind <> 'refund';
CREATE INDEX payment_attempts_refunds ON cobro.payment_attempts (refund_of)
    WHERE refund_of IS NOT NULL;

CREATE FUNCTION cobro.guard_refund() RETURNS trigger LANGUAGE plpgsql AS $$
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
    -- Read after the lock: every refund of this charge committed before it is counted.
    SELECT coalesce(sum(a.amount_minor), 0) INTO v_refunded
      FROM cobro.payment_attempts a
     WHERE a.refund_of = NEW.refund_of AND a.state <> 'RECHAZADO';
    IF v_refunded + NEW.amount_minor > v_charge.amount_minor THEN
        RAISE EXCEPTION 'refund of % % exceeds what is left to refund of attempt %: % of % already refunded or in flight',
            NEW.amount_minor, NEW.currency, v_charge.id, v_refunded, v_charge.amount_minor
            USING ERRCODE = 'CB008';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER refunds_within_capture
    BEFORE INSERT ON cobro.payment_attempts
    FOR EACH ROW WHEN (NEW.kind = 'refund') EXECUTE FUNCTION cobro.guard_refund();

CREATE FUNCTION cobro.refuse_identity_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'what attempt % sends (order, amount, currency, key, kind, refund_of) never changes',
        OLD.id USING ERRCODE = 'insufficient_privilege';
END;
$$;
CREATE TRIGGER attempt_identity_fixed
    BEFORE UPDATE ON cobro.payment_attempts
    FOR EACH ROW WHEN (OLD.order_id IS DISTINCT FROM NEW.order_id
                       OR OLD.amount_minor IS DISTINCT FROM NEW.amount_minor
                       OR OLD.currency IS DISTINCT FROM NEW.currency
                       OR OLD.idempotency_key IS DISTINCT FROM NEW.idempotency_key
                       OR OLD.kind IS DISTINCT FROM NEW.kind
                       OR OLD.refund_of IS DISTINCT FROM NEW.refund_of)
    EXECUTE FUNCTION cobro.refuse_identity_change();

-- Refunds wake on their own queue.
CREATE OR REPLACE FUNCTION cobro.wake(p_attempt_id uuid, p_run_at timestamptz DEFAULT now(),
                                      p_priority integer DEFAULT 0)
RETURNS text LANGUAGE sql AS $$
    INSERT INTO apalis.jobs (id, job_type, job, run_at, max_attempts, priority)
    VALUES (apalis.generate_ulid(),
            CASE WHEN EXISTS (SELECT 1 FROM cobro.payment_attempts a
                               WHERE a.id = p_attempt_id AND a.kind = 'refund')
                 THEN 'cobro.refund' ELSE 'cobro.charge' END,
            convert_to(json_build_object('attempt_id', p_attempt_id)::text, 'UTF8'),
            p_run_at, 3, p_priority)
    RETURNING id;
$$;

CREATE FUNCTION cobro.request_refund(
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
