-- The escalation queue's scan (see migrations/postgres/…_escalations.sql).
CREATE INDEX payment_attempts_escalation ON payment_attempts (created_at)
    WHERE state IN ('DESCONOCIDO', 'EN_REVISION');
