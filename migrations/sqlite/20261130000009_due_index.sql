-- The sweeper's scan without the history (see migrations/postgres/…_due_index.sql).
DROP INDEX payment_attempts_due;
CREATE INDEX payment_attempts_due ON payment_attempts (next_action_at)
    WHERE state IN ('PENDIENTE', 'EN_PROCESO', 'DESCONOCIDO', 'RECHAZADO')
      AND (state <> 'RECHAZADO' OR next_action_at IS NOT NULL);
