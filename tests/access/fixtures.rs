//! What the access tests start from: the web process with the test keys,
//! a browser-like client with a sign-in cookie, attempts in each state a
//! route acts on (approved, declined, with a retry pending, in review),
//! open reconciliation cases, the form token a finance page hands out, and
//! the snapshot a refused request must leave unchanged.

use cobro::domain::ChargeRequest;
use cobro::state::Event;
use cobro::store::{Attempt, Store};
use serde_json::json;
use uuid::Uuid;

use super::common::{self, TestDb, form_token_in, secret, send_text, step};

/// A client like a browser after its first page: it carries one sign-in
/// cookie, to which the forms' tokens are bound.
pub fn client() -> reqwest::Client {
    let mut cookie = reqwest::header::HeaderMap::new();
    cookie.insert(
        reqwest::header::COOKIE,
        reqwest::header::HeaderValue::from_static("cobro_signin=0123456789abcdef0123456789abcdef"),
    );
    reqwest::Client::builder()
        .default_headers(cookie)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn pending(store: &Store, order: &str) -> Attempt {
    let req = ChargeRequest::parse(order, 1_000, "USD", None, Some("pm_test")).unwrap();
    let id = store.enqueue(&req).await.unwrap().attempt_id;
    store.load(id).await.unwrap().0
}

pub async fn approved(store: &Store, order: &str) -> Attempt {
    let a = pending(store, order).await;
    let a = step(store, &a, Event::Claim, None).await;
    step(store, &a, Event::Approved, Some("ch_access")).await
}

pub async fn declined(store: &Store, order: &str) -> Attempt {
    let a = pending(store, order).await;
    let a = step(store, &a, Event::Claim, None).await;
    step(store, &a, Event::Declined, Some("insufficient_funds")).await
}

/// Declined, with a business retry scheduled a day later.
pub async fn retry_pending(store: &Store, order: &str) -> Attempt {
    use cobro::store::{Applied, Change};
    let a = pending(store, order).await;
    let a = step(store, &a, Event::Claim, None).await;
    let mut decline = Change::new(Some(Event::Declined), "test", "worker:test");
    decline.decline_code = Some("insufficient_funds");
    decline.act_in = Some(std::time::Duration::from_secs(86_400));
    match store.apply(&a, &decline).await.unwrap() {
        Applied::Moved(a) => *a,
        Applied::Lost => panic!("lost a race nobody runs"),
    }
}

pub async fn in_review(store: &Store, order: &str) -> Attempt {
    let req = ChargeRequest::parse(order, 1_000, "USD", None, Some("pm_test")).unwrap();
    common::in_review_of(store, &req).await
}

pub async fn open_case(db: &TestDb, gateway_ref: &str) -> i64 {
    common::open_case(db, "unmatched_charge", "order-x", gateway_ref, "{}").await
}

/// A `double_charge` case for `order`: its approved charge `ch_access`
/// and two duplicates, `ch_dup_api` and `ch_dup_form`.
pub async fn double_charge_case(db: &TestDb, order: &str) -> i64 {
    let record = |id: &str| {
        json!({"kind": "charges", "id": id, "idempotency_key": "k", "order_id": order,
               "amount_minor": 1000, "currency": "USD", "status": "approved",
               "at": "2026-12-01T00:00:00Z"})
    };
    let details =
        json!({"gateway": [record("ch_access"), record("ch_dup_api"), record("ch_dup_form")]})
            .to_string();
    let charges = "ch_access,ch_dup_api,ch_dup_form";
    common::open_case(db, "double_charge", order, charges, &details).await
}

/// What a refused request must leave as it was: every attempt's version
/// and state, the number of attempts and transition rows, the open cases.
pub async fn snapshot(db: &TestDb) -> (i64, i64, usize) {
    (
        db.attempts().await,
        db.store.transition_rows().await.unwrap(),
        db.store.open_cases().await.unwrap().len(),
    )
}

/// The form token the finance page gives `name` (read from the page).
pub async fn form_token(http: &reqwest::Client, base: &str, name: &str, attempt: Uuid) -> String {
    let req = http
        .get(format!("{base}/finance/attempts/{attempt}"))
        .basic_auth(name, Some(secret(name)));
    form_token_in(&send_text(req).await)
}
