-- The escalation queue's scan: attempts in doubt (DESCONOCIDO) or in review
-- (EN_REVISION), oldest first, without reading the settled history.
CREATE INDEX payment_attempts_escalation ON cobro.payment_attempts (created_at)
    WHERE state IN ('DESCONOCIDO', 'EN_REVISION');
