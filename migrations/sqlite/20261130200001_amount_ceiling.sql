-- The ceiling on amount_minor (see migrations/postgres/…_amount_ceiling.sql):
-- 999,999,999,999 (10^12 - 1) minor units, whoever writes. SQLite cannot
-- add a CHECK to an existing table, so triggers refuse an insert or an
-- update above it, with the message the Rust side and PostgreSQL's
-- functions give ("invalid amount_minor: ...").
--
-- An existing attempt above the ceiling stops this migration: the table
-- below refuses to hold it (triggers never look at rows already stored).

CREATE TEMP TABLE existing_attempts_within_the_ceiling (
    amount_minor INTEGER NOT NULL CHECK (amount_minor <= 999999999999)
) STRICT;
INSERT INTO existing_attempts_within_the_ceiling (amount_minor)
    SELECT amount_minor FROM payment_attempts WHERE amount_minor > 999999999999;
DROP TABLE existing_attempts_within_the_ceiling;

CREATE TRIGGER amount_within_ceiling_on_insert BEFORE INSERT ON payment_attempts
WHEN NEW.amount_minor > 999999999999
BEGIN
    SELECT RAISE(ABORT, 'invalid amount_minor: must be at most 999999999999 minor units (set by the ceiling the database enforces)');
END;

CREATE TRIGGER amount_within_ceiling_on_update BEFORE UPDATE OF amount_minor ON payment_attempts
WHEN NEW.amount_minor > 999999999999
BEGIN
    SELECT RAISE(ABORT, 'invalid amount_minor: must be at most 999999999999 minor units (set by the ceiling the database enforces)');
END;
