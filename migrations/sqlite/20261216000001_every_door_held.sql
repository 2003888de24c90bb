-- The holes migrations/postgres/…_every_door_held.sql closes (read it for
-- the design), on SQLite, plus two of SQLite's own:
--
-- 1. The first send of a charge (PENDIENTE -> EN_PROCESO) meets the holds a
--    new attempt meets: an open case that holds the order (CB011; not one
--    about the attempt itself, whose send carries its own key), a cancel
--    that means "do not charge it" (CB012).
-- 2. (PostgreSQL's READ COMMITTED rule: SQLite has one writer at a time and
--    every door writes under BEGIN IMMEDIATE; nothing to add.)
-- 3. A duplicate's refund must be listed as approved, in its currency and
--    for at least its amount, by an open double_charge case of the order
--    (CB007).
-- 4. An attempt's cancel_reason, once written, only ever changes from a
--    reason that does not hold the order to one that does (CB020).
-- 5. INSERT OR REPLACE of an existing attempt deleted the row and inserted
--    another without an UPDATE, so no state rule ran (a RECHAZADO attempt
--    became APROBADO). An insert whose id exists is refused (CB020).
-- 6. The tables the rules read (harmless_case_kinds,
--    order_holding_cancel_reasons) could be written; like state_moves,
--    they now change only by migration.

CREATE TRIGGER first_send_gate BEFORE UPDATE OF state ON payment_attempts
WHEN OLD.state = 'PENDIENTE' AND NEW.state = 'EN_PROCESO' AND NEW.kind <> 'refund'
BEGIN
    SELECT RAISE(ABORT, 'CB011: the order has an open case saying the gateway may have charged it: the charge is not sent until finance resolves the case (cobro escalations resolve-case)')
     WHERE EXISTS (SELECT 1 FROM recon_cases c
                    WHERE c.order_id = NEW.order_id AND c.resolved_at IS NULL
                      AND c.kind NOT IN (SELECT kind FROM harmless_case_kinds)
                      AND c.attempt_id IS NOT NEW.id);
    SELECT RAISE(ABORT, 'CB012: the order was cancelled with a reason that means do not charge it: charge a new order instead')
     WHERE EXISTS (SELECT 1 FROM payment_attempts a
                    WHERE a.order_id = NEW.order_id AND a.kind <> 'refund'
                      AND a.cancel_reason IN (SELECT reason FROM order_holding_cancel_reasons));
END;

CREATE TRIGGER guard_duplicate_refund BEFORE INSERT ON payment_attempts
WHEN NEW.refund_of_gateway IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'CB007: the gateway charge is not an approved charge of at least the refund''s amount listed by an open double_charge case of the order: only such a duplicate is refunded this way')
     WHERE NOT EXISTS (
         SELECT 1 FROM recon_cases c,
                json_each(CASE WHEN json_type(c.details, '$.gateway') = 'array'
                               THEN json_extract(c.details, '$.gateway') ELSE '[]' END) g
          WHERE c.kind = 'double_charge' AND c.resolved_at IS NULL
            AND c.order_id = NEW.order_id
            AND json_extract(g.value, '$.id') = NEW.refund_of_gateway
            AND json_extract(g.value, '$.status') = 'approved'
            AND json_extract(g.value, '$.order_id') = NEW.order_id
            AND json_extract(g.value, '$.currency') = NEW.currency
            AND json_type(g.value, '$.amount_minor') = 'integer'
            AND json_extract(g.value, '$.amount_minor') >= NEW.amount_minor);
END;

CREATE TRIGGER cancel_reason_once BEFORE UPDATE OF cancel_reason ON payment_attempts
WHEN OLD.cancel_reason IS NOT NULL AND OLD.cancel_reason IS NOT NEW.cancel_reason
 AND NOT (OLD.cancel_reason NOT IN (SELECT reason FROM order_holding_cancel_reasons)
          AND NEW.cancel_reason IN (SELECT reason FROM order_holding_cancel_reasons))
BEGIN
    SELECT RAISE(ABORT, 'CB020: this attempt was cancelled: a cancel is never undone or reworded, only made one that holds the order');
END;

CREATE TRIGGER attempts_never_replaced BEFORE INSERT ON payment_attempts
WHEN EXISTS (SELECT 1 FROM payment_attempts WHERE id = NEW.id)
BEGIN
    SELECT RAISE(ABORT, 'CB020: an attempt with this id exists: an attempt is never replaced (its state moves by UPDATE, through the state machine)');
END;

CREATE TRIGGER harmless_case_kinds_fixed_insert BEFORE INSERT ON harmless_case_kinds
BEGIN SELECT RAISE(ABORT, 'harmless_case_kinds is a rule''s table: it changes only by migration'); END;
CREATE TRIGGER harmless_case_kinds_fixed_update BEFORE UPDATE ON harmless_case_kinds
BEGIN SELECT RAISE(ABORT, 'harmless_case_kinds is a rule''s table: it changes only by migration'); END;
CREATE TRIGGER harmless_case_kinds_fixed_delete BEFORE DELETE ON harmless_case_kinds
BEGIN SELECT RAISE(ABORT, 'harmless_case_kinds is a rule''s table: it changes only by migration'); END;
CREATE TRIGGER order_holding_cancel_reasons_fixed_insert BEFORE INSERT ON order_holding_cancel_reasons
BEGIN SELECT RAISE(ABORT, 'order_holding_cancel_reasons is a rule''s table: it changes only by migration'); END;
CREATE TRIGGER order_holding_cancel_reasons_fixed_update BEFORE UPDATE ON order_holding_cancel_reasons
BEGIN SELECT RAISE(ABORT, 'order_holding_cancel_reasons is a rule''s table: it changes only by migration'); END;
CREATE TRIGGER order_holding_cancel_reasons_fixed_delete BEFORE DELETE ON order_holding_cancel_reasons
BEGIN SELECT RAISE(ABORT, 'order_holding_cancel_reasons is a rule''s table: it changes only by migration'); END;
