//! The review sweep on PostgreSQL (index `payment_attempts_review_due`).

/// The review sweep's statement (run by `pg::run_sweep`).
pub(crate) const SWEEP: &str = concat!(
    "WITH due AS (
            SELECT id FROM cobro.payment_attempts
             WHERE state = 'EN_REVISION'
               AND next_action_at <= now()
               AND (lease_owner IS NOT NULL
                    OR next_action_at <= now() - make_interval(secs => $1::float8))
               AND (woken_at IS NULL OR woken_at <= now() - make_interval(secs => $2::float8))
",
    due_last!(),
    "
         ), marked AS (
            UPDATE cobro.payment_attempts a SET woken_at = now()
              FROM due WHERE a.id = due.id
            RETURNING a.id
         )
         SELECT count(cobro.wake(id, now(), 0)) FROM marked",
);
