//! SQLite SQL for the counts (see `store::counts`).

pub(crate) const BY_STATE: &str = "SELECT state, count(*) FROM payment_attempts
          WHERE substr(order_id, 1, length(?1)) = ?1
          GROUP BY state ORDER BY state";

/// The charge queue's jobs not finished yet (`store::CHARGE_QUEUE`).
pub(crate) const OPEN_WAKEUPS: &str = "SELECT count(*) FROM Jobs
          WHERE job_type = 'cobro.charge' AND status IN ('Pending', 'Queued', 'Running')";

pub(crate) const TRANSITION_ROWS: &str = "SELECT count(*) FROM attempt_transitions";

pub(crate) const OPEN_CASES: &str = "SELECT count(*) FROM recon_cases WHERE resolved_at IS NULL";
