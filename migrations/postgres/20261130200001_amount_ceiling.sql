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
-- bad input (SQLSTATE 22023, "invalid amount_minor: ..."), and
-- enqueue_charge takes who enqueues (`p_actor`, default 'app', kept in the
-- attempt's first transition-log row: `api:<key name>` for POST /charges).
-- Both are defined once, in …_same_rules.sql, which runs next. The actor is
-- a new last parameter, so the five-parameter function is dropped here
-- (two overloads with defaults would make a three-argument call ambiguous).

DROP FUNCTION cobro.enqueue_charge(text, bigint, text, uuid, text);
