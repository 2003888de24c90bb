-- migrations/postgres/…_refund_made_held.sql on SQLite (read it for why): a
-- refund the gateway made although cobro holds it RECHAZADO is marked
-- refund_made_at, once, and its amount counts as refunded again.
--
-- The capture check is a trigger of its own here rather than
-- refunds_within_capture written again: it sums the refunds that count,
-- made ones included, and fires only for a charge that has a made refund
-- (where it is stricter than refunds_within_capture; elsewhere it adds
-- nothing). Re-creating refunds_within_capture would also change the order
-- SQLite runs it in against charge_gate.
ALTER TABLE payment_attempts ADD COLUMN refund_made_at INTEGER
    CHECK (refund_made_at IS NULL OR (kind = 'refund' AND state = 'RECHAZADO'));
CREATE TRIGGER refund_made_once BEFORE UPDATE ON payment_attempts
WHEN OLD.refund_made_at IS NOT NULL AND OLD.refund_made_at IS NOT NEW.refund_made_at
BEGIN
    SELECT RAISE(ABORT, 'this refund was made at the gateway after it was declined here: that is never undone');
END;

CREATE TRIGGER refund_made_counted BEFORE INSERT ON payment_attempts
WHEN NEW.kind = 'refund' AND NEW.refund_of_gateway IS NULL
 AND EXISTS (SELECT 1 FROM payment_attempts
              WHERE refund_of = NEW.refund_of AND refund_made_at IS NOT NULL)
BEGIN
    SELECT RAISE(ABORT, 'CB008: the refund exceeds what is left to refund of its charge')
     WHERE (SELECT coalesce(sum(amount_minor), 0) FROM payment_attempts
             WHERE refund_of = NEW.refund_of AND refund_of_gateway IS NULL
               AND ((state <> 'RECHAZADO' AND refund_failed_at IS NULL)
                    OR refund_made_at IS NOT NULL)) + NEW.amount_minor
           > (SELECT amount_minor FROM payment_attempts WHERE id = NEW.refund_of);
END;

DROP INDEX one_refund_per_duplicate;
CREATE UNIQUE INDEX one_refund_per_duplicate ON payment_attempts (refund_of_gateway)
    WHERE refund_of_gateway IS NOT NULL
      AND ((state <> 'RECHAZADO' AND refund_failed_at IS NULL) OR refund_made_at IS NOT NULL);
