//! The review sweep on SQLite (index `payment_attempts_review_due`).

use uuid::Uuid;

use super::uuid;
use crate::store::StoreError;

/// The review sweep's statement (run by `sweeps::run`).
pub(crate) const SWEEP: &str = concat!(
    "UPDATE payment_attempts SET woken_at = ",
    now_ms!(),
    " WHERE id IN (
            SELECT id FROM payment_attempts
             WHERE state = 'EN_REVISION'
               AND next_action_at <= ",
    now_ms!(),
    "
               AND (lease_owner IS NOT NULL OR next_action_at <= ",
    now_ms!(),
    " - ?1)
               AND (woken_at IS NULL OR woken_at <= ",
    now_ms!(),
    " - ?2)
",
    due_last!(),
    ")
         RETURNING id"
);

/// The wake-up of a row the review sweep returned: its attempt, priority 0.
pub(crate) fn woken((id,): &(String,)) -> Result<(Uuid, i32), StoreError> {
    Ok((uuid(id)?, 0))
}
