//! Declines on demand, for the notice and payment-method tests: the
//! simulator told to decline with one code, an order enqueued and waited
//! for until declined, a scheduled business retry made due now.

use std::time::Duration;

use cobro::domain::ChargeRequest;
use cobro::sim::Faults;
use cobro::state::State;
use cobro::store::Store;
use uuid::Uuid;

use super::common::{TestDb, set_faults, settled};

/// Every charge from now on is declined with `code`.
pub async fn decline_with(sim: &str, code: &str) {
    let faults = Faults {
        p_decline: 1.0,
        decline_codes: vec![code.into()],
        ..Faults::default()
    };
    set_faults(sim, &faults).await;
}

/// Enqueues `order` (2 500 EUR minor units) and waits for its first
/// attempt's decline.
pub async fn declined(store: &Store, order: &str, method: Option<&str>) -> cobro::store::Attempt {
    let req = ChargeRequest::parse(order, 2_500, "EUR", None, method).unwrap();
    let id = store.enqueue(&req).await.unwrap().attempt_id;
    settled(store, id, State::Rechazado, Duration::from_secs(15)).await
}

/// Makes a declined attempt's business retry due now and wakes it.
pub async fn retry_now(db: &TestDb, id: Uuid) {
    db.exec(
        "UPDATE cobro.payment_attempts SET next_action_at = now() WHERE id = $1::uuid",
        "UPDATE payment_attempts SET next_action_at = 0 WHERE id = ?1",
        &[&id.to_string()],
    )
    .await
    .unwrap();
    db.store.wake(id).await.unwrap();
}
