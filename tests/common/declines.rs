//! Declines on demand, for the notice and payment-method tests: the
//! simulator told to decline with one code, an order enqueued and waited
//! for until declined.

use std::time::Duration;

use cobro::domain::ChargeRequest;
use cobro::state::State;
use cobro::store::Store;

use super::common::{declining, set_faults, settled};

/// Every charge from now on is declined with `code`.
pub async fn decline_with(sim: &str, code: &str) {
    set_faults(sim, &declining(code)).await;
}

/// Enqueues `order` (2 500 EUR minor units) and waits for its first
/// attempt's decline.
pub async fn declined(store: &Store, order: &str, method: Option<&str>) -> cobro::store::Attempt {
    let req = ChargeRequest::parse(order, 2_500, "EUR", None, method).unwrap();
    let id = store.enqueue(&req).await.unwrap().attempt_id;
    settled(store, id, State::Rechazado, Duration::from_secs(15)).await
}
