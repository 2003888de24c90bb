-- The review janitor and the queue's pagination (see
-- migrations/postgres/20261202000001_review_janitor.sql).
CREATE INDEX payment_attempts_review_due ON payment_attempts (next_action_at)
    WHERE state = 'EN_REVISION';

DROP INDEX payment_attempts_escalation;
CREATE INDEX payment_attempts_escalation ON payment_attempts (created_at, id)
    WHERE state IN ('DESCONOCIDO', 'EN_REVISION');

UPDATE payment_attempts
   SET next_action_at = CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
 WHERE state = 'EN_REVISION' AND next_action_at IS NULL AND send_count > 0;
