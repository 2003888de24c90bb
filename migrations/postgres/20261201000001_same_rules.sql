-- One definition of valid input, field by field: the SQL functions accept
-- and refuse exactly what the Rust parsers in src/domain/ do, with the
-- same reasons (tests/same_rules.rs feeds both the same strings, and every
-- Unicode code point to the order-id and payment-method rules).
--
-- Before this migration enqueue_charge judged an order id with btrim()
-- (ASCII spaces only) and [[:cntrl:]] (whatever the database's locale
-- says), while Rust used its own trim() and is_control(): an order id
-- ending in U+00A0 was stored here and refused by the worker, so it stayed
-- PENDIENTE for ever. Character classes are now written as code points,
-- never as locale classes.
--
-- The rules (the first failure is the reason given):
--   order_id        1-200 characters (code points); no character of Unicode
--                   categories Cc, Cf, Zl, Zp anywhere (C0 and C1 controls,
--                   DEL, soft hyphen, zero-width characters, direction
--                   marks and overrides, U+FEFF, line and paragraph
--                   separators); no White_Space character (U+0020, U+00A0,
--                   U+2003, U+3000, ...) first or last.
--   amount_minor    a whole number from 1 to 999999999999.
--   currency        exactly one of cobro.currencies' codes.
--   idempotency_key a uuid (the type reads the text), not the nil UUID.
--   payment_method  absent, or 1-255 characters of A-Z a-z 0-9 _ - . :
--                   with fewer than 12 digits.
--
-- cobro.charge_input_problem(...) returns the refusal ('invalid <field>:
-- <reason>') or NULL, so an app can check input before its own writes.
-- enqueue_charge and request_refund raise it with SQLSTATE 22023; this is
-- their one definition after …_refunds.sql: the amount ceiling and
-- enqueue_charge's p_actor parameter (…_amount_ceiling.sql dropped the
-- five-parameter version) are defined here, the errors are unchanged.

-- 'U+00A0': how a refusal names a character (at least four hex digits).
CREATE FUNCTION cobro.code_point(p_char text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'U+' || lpad(upper(to_hex(ascii(p_char))), greatest(4, length(to_hex(ascii(p_char)))), '0');
$$;

CREATE FUNCTION cobro.order_id_problem(p_order_id text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    v_bad text;
BEGIN
    IF p_order_id IS NULL OR p_order_id = '' THEN
        RETURN 'must not be empty';
    END IF;
    IF length(p_order_id) > 200 THEN
        RETURN format('must be at most 200 characters, got %s', length(p_order_id));
    END IF;
    -- Cc, Cf, Zl, Zp (src/domain.rs INVISIBLE; text cannot hold U+0000).
    v_bad := substring(p_order_id FROM '[\u0001-\u001F\u007F-\u009F\u00AD\u0600-\u0605\u061C\u06DD\u070F\u0890-\u0891\u08E2\u180E\u200B-\u200F\u2028-\u202E\u2060-\u2064\u2066-\u206F\uFEFF\uFFF9-\uFFFB\U000110BD\U000110CD\U00013430-\U0001343F\U0001BCA0-\U0001BCA3\U0001D173-\U0001D17A\U000E0001\U000E0020-\U000E007F]');
    IF v_bad IS NOT NULL THEN
        RETURN format('must not contain control or invisible format characters, found %s',
                      cobro.code_point(v_bad));
    END IF;
    -- White_Space (src/domain.rs WHITESPACE).
    IF left(p_order_id, 1) ~ '^[\u0009-\u000D\u0020\u0085\u00A0\u1680\u2000-\u200A\u2028-\u2029\u202F\u205F\u3000]$' THEN
        RETURN format('must not start with whitespace, found %s', cobro.code_point(left(p_order_id, 1)));
    END IF;
    IF right(p_order_id, 1) ~ '^[\u0009-\u000D\u0020\u0085\u00A0\u1680\u2000-\u200A\u2028-\u2029\u202F\u205F\u3000]$' THEN
        RETURN format('must not end with whitespace, found %s', cobro.code_point(right(p_order_id, 1)));
    END IF;
    RETURN NULL;
END;
$$;

CREATE FUNCTION cobro.amount_problem(p_amount_minor bigint) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN p_amount_minor IS NULL OR p_amount_minor <= 0 THEN
            format('must be a positive whole number of minor units, got %s',
                   coalesce(p_amount_minor::text, 'NULL'))
        WHEN p_amount_minor > 999999999999 THEN
            format('must be at most 999999999999 minor units (set by the ceiling the database enforces), got %s',
                   p_amount_minor)
    END;
$$;

CREATE FUNCTION cobro.payment_method_problem(p_payment_method text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN p_payment_method IS NULL THEN NULL
        WHEN length(p_payment_method) NOT BETWEEN 1 AND 255 THEN 'must be 1-255 characters'
        WHEN p_payment_method !~ '^[A-Za-z0-9_.:-]+$' THEN
            'must be an opaque token of letters, digits, ''_'', ''-'', ''.'', '':'''
        WHEN length(regexp_replace(p_payment_method, '[^0-9]', '', 'g')) >= 12 THEN
            'looks like a card number; send the gateway''s payment-method token instead'
    END;
$$;

CREATE FUNCTION cobro.idempotency_key_problem(p_key uuid) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p_key = '00000000-0000-0000-0000-000000000000'::uuid
                THEN 'must not be the nil UUID' END;
$$;

-- The first refusal of a charge's input, in the order the Rust parser
-- checks (order_id, amount_minor, currency, idempotency_key,
-- payment_method), as 'invalid <field>: <reason>'; NULL when it is valid.
-- A NULL key is valid (enqueue_charge generates one).
CREATE FUNCTION cobro.charge_input_problem(
    p_order_id        text,
    p_amount_minor    bigint,
    p_currency        text,
    p_idempotency_key uuid DEFAULT NULL,
    p_payment_method  text DEFAULT NULL
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
    RETURN NULL;
END;
$$;

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
    v_key     uuid := coalesce(p_key, gen_random_uuid());
    v_charge  cobro.payment_attempts;
    v_old     cobro.payment_attempts;
    v_id      uuid := gen_random_uuid();
    v_problem text;
BEGIN
    v_problem := cobro.amount_problem(p_amount_minor);
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION 'invalid amount_minor: %', v_problem USING ERRCODE = '22023';
    END IF;
    v_problem := cobro.idempotency_key_problem(v_key);
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION 'invalid idempotency_key: %', v_problem USING ERRCODE = '22023';
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
