-- Refunding a duplicate that exists only at the gateway (a double_charge
-- case); see migrations/postgres/…_duplicate_refund.sql for the design. The
-- triggers are re-created with the duplicate's rules; SQLite has one writer
-- at a time, so the checks cannot race.

ALTER TABLE payment_attempts ADD COLUMN refund_of_gateway TEXT
    CHECK (refund_of_gateway IS NULL
           OR (kind = 'refund' AND length(refund_of_gateway) BETWEEN 1 AND 255));
CREATE UNIQUE INDEX one_refund_per_duplicate ON payment_attempts (refund_of_gateway)
    WHERE refund_of_gateway IS NOT NULL AND state <> 'RECHAZADO';

DROP TRIGGER refunds_within_capture;
CREATE TRIGGER refunds_within_capture BEFORE INSERT ON payment_attempts
WHEN NEW.kind = 'refund'
BEGIN
    SELECT RAISE(ABORT, 'CB404: the attempt to refund does not exist')
     WHERE NOT EXISTS (SELECT 1 FROM payment_attempts WHERE id = NEW.refund_of);
    SELECT RAISE(ABORT, 'CB007: only an APROBADO charge can be refunded')
     WHERE NOT EXISTS (SELECT 1 FROM payment_attempts
                        WHERE id = NEW.refund_of AND state = 'APROBADO' AND kind <> 'refund');
    SELECT RAISE(ABORT, 'invalid currency: a refund has its charge''s order and currency')
     WHERE NOT EXISTS (SELECT 1 FROM payment_attempts
                        WHERE id = NEW.refund_of AND order_id = NEW.order_id
                          AND currency = NEW.currency);
    SELECT RAISE(ABORT, 'CB007: the gateway charge is the order''s own approved charge, not a duplicate: refund it the usual way')
     WHERE NEW.refund_of_gateway IS NOT NULL
       AND EXISTS (SELECT 1 FROM payment_attempts
                    WHERE id = NEW.refund_of AND gateway_charge_id = NEW.refund_of_gateway);
    SELECT RAISE(ABORT, 'CB008: the refund exceeds what is left to refund of its charge')
     WHERE NEW.refund_of_gateway IS NULL
       AND (SELECT coalesce(sum(amount_minor), 0) FROM payment_attempts
             WHERE refund_of = NEW.refund_of AND state <> 'RECHAZADO'
               AND refund_of_gateway IS NULL) + NEW.amount_minor
           > (SELECT amount_minor FROM payment_attempts WHERE id = NEW.refund_of);
END;

DROP TRIGGER attempt_identity_fixed;
CREATE TRIGGER attempt_identity_fixed BEFORE UPDATE ON payment_attempts
WHEN OLD.order_id IS NOT NEW.order_id OR OLD.amount_minor IS NOT NEW.amount_minor
  OR OLD.currency IS NOT NEW.currency OR OLD.idempotency_key IS NOT NEW.idempotency_key
  OR OLD.kind IS NOT NEW.kind OR OLD.refund_of IS NOT NEW.refund_of
  OR OLD.refund_of_gateway IS NOT NEW.refund_of_gateway
BEGIN
    SELECT RAISE(ABORT, 'what an attempt sends (order, amount, currency, key, kind, refund_of) never changes');
END;
