//! Reconciliation and settlement checks in a test: the window that holds
//! everything the test did, and a case opened as reconciliation or a
//! contradicting webhook would open it.

use chrono::{TimeDelta, Utc};
use cobro::recon::Window;

use super::TestDb;

/// The two hours around now: everything a test does falls in it.
pub fn around_now() -> Window {
    let now = Utc::now();
    Window::new(now - TimeDelta::hours(1), now + TimeDelta::hours(1)).unwrap()
}

/// Opens a `kind` case on `order` about gateway charge(s) `gateway_ref`,
/// with `details` (JSON), by raw SQL (another transaction, as reconciliation
/// or a webhook writes it); its id.
pub async fn open_case(
    db: &TestDb,
    kind: &str,
    order: &str,
    gateway_ref: &str,
    details: &str,
) -> i64 {
    let dedupe = format!("{kind}:{order}:{gateway_ref}");
    db.exec(
        "INSERT INTO cobro.recon_cases (kind, dedupe_key, order_id, gateway_ref, details, window_from, window_to)
         VALUES ($1, $2, $3, $4, $5::jsonb, now() - interval '1 day', now())",
        "INSERT INTO recon_cases (kind, dedupe_key, order_id, gateway_ref, details, window_from, window_to, opened_at)
         VALUES (?1, ?2, ?3, ?4, ?5, 0, 1, 2)",
        &[kind, &dedupe, order, gateway_ref, details],
    )
    .await
    .unwrap();
    let cases = db.store.open_cases().await.unwrap();
    cases.iter().find(|c| c.dedupe_key == dedupe).unwrap().id
}
