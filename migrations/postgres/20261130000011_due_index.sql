-- The sweeper's scan without the history: the old due index held every
-- settled RECHAZADO attempt (next_action_at NULL), so at 1,000,000
-- attempts each sweep read every historical decline (72-155 ms, see
-- BENCHMARKS.md). A declined attempt is due only while its business retry
-- is scheduled (next_action_at set); the sweep query says the same.
DROP INDEX cobro.payment_attempts_due;
CREATE INDEX payment_attempts_due ON cobro.payment_attempts (next_action_at)
    WHERE state IN ('PENDIENTE', 'EN_PROCESO', 'DESCONOCIDO', 'RECHAZADO')
      AND (state <> 'RECHAZADO' OR next_action_at IS NOT NULL);
