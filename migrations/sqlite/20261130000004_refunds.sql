-- Refunds, protected like charges (see migrations/postgres/…_refunds.sql for
-- the design). A refund is an attempt of kind 'refund' with refund_of
-- pointing at the APROBADO charge it refunds. SQLite has one writer at a
-- time, so the insert trigger's sum cannot race with another refund.
--
-- The CHECK on kind must admit 'refund': SQLite cannot alter a CHECK, so
-- the column is rebuilt (copied aside, dropped, re-added, copied back).
-- Trigger messages start with the code the Rust side maps (CB404, CB007,
-- CB008), as PostgreSQL's SQLSTATEs.

ALTER TABLE payment_attempts ADD COLUMN kind_before_refunds TEXT;
UPDATE payment_attempts SET kind_before_refunds = kind;
ALTER TABLE payment_attempts DROP COLUMN kind;
ALTER TABLE payment_attempts ADD COLUMN kind TEXT NOT NULL DEFAULT 'initial'
    CHECK (kind IN ('initial', 'business_retry', 'refund'));
UPDATE payment_attempts SET kind = kind_before_refunds;
ALTER TABLE payment_attempts DROP COLUMN kind_before_refunds;
ALTER TABLE payment_attempts ADD COLUMN refund_of TEXT REFERENCES payment_attempts (id)
    CHECK ((kind = 'refund') = (refund_of IS NOT NULL)
           AND (kind <> 'refund' OR payment_method IS NULL));

DROP INDEX one_approved_per_order;
CREATE UNIQUE INDEX one_approved_per_order ON payment_attempts (order_id)
    WHERE state = 'APROBADO' AND kind <> 'refund';
DROP INDEX one_live_attempt_per_order;
CREATE UNIQUE INDEX one_live_attempt_per_order ON payment_attempts (order_id)
    WHERE state IN ('PENDIENTE', 'EN_PROCESO', 'DESCONOCIDO', 'EN_REVISION') AND kind <> 'refund';
CREATE INDEX payment_attempts_refunds ON payment_attempts (refund_of)
    WHERE refund_of IS NOT NULL;

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
    SELECT RAISE(ABORT, 'CB008: the refund exceeds what is left to refund of its charge')
     WHERE (SELECT coalesce(sum(amount_minor), 0) FROM payment_attempts
             WHERE refund_of = NEW.refund_of AND state <> 'RECHAZADO') + NEW.amount_minor
           > (SELECT amount_minor FROM payment_attempts WHERE id = NEW.refund_of);
END;

CREATE TRIGGER attempt_identity_fixed BEFORE UPDATE ON payment_attempts
WHEN OLD.order_id IS NOT NEW.order_id OR OLD.amount_minor IS NOT NEW.amount_minor
  OR OLD.currency IS NOT NEW.currency OR OLD.idempotency_key IS NOT NEW.idempotency_key
  OR OLD.kind IS NOT NEW.kind OR OLD.refund_of IS NOT NEW.refund_of
BEGIN
    SELECT RAISE(ABORT, 'what an attempt sends (order, amount, currency, key, kind, refund_of) never changes');
END;
