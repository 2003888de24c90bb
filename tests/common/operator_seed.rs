//! The attempts the operator tests search (`tests/operator.rs`,
//! `tests/operator_cli.rs`; each includes this file with
//! `#[path = "common/operator_seed.rs"] mod operator_seed;`).

use cobro::domain::ChargeRequest;
use cobro::state::Event;
use cobro::store::Attempt;
use serde_json::Value;

use super::common::{Backend, TestDb, ask_refund, in_review, step};

/// Seven attempts: `op-1` approved and its refund; `op-2` declined and its
/// business retry; `op-3` in review with a lookup; `op-4 <b>&"x"` waiting;
/// `op-old` created on 2026-01-15. `op-1`, its refund and `op-2`'s first
/// attempt share one `created_at` (ties are ordered by id).
pub struct Seeded {
    pub db: TestDb,
    pub op1: Attempt,
    pub refund: Attempt,
    pub op2: Attempt,
    pub retry: Attempt,
    pub op3: Attempt,
    pub op4: Attempt,
    pub old: Attempt,
}

impl Seeded {
    /// Every attempt, newest first as the listing orders them.
    pub fn newest_first(&self) -> Vec<String> {
        let mut all = [
            &self.op1,
            &self.refund,
            &self.op2,
            &self.retry,
            &self.op3,
            &self.op4,
            &self.old,
        ]
        .map(|a| (a.created_at, a.id));
        all.sort();
        all.iter().rev().map(|(_, id)| id.to_string()).collect()
    }
}

async fn enqueue(db: &TestDb, order: &str) -> Attempt {
    let req = ChargeRequest::parse(order, 1_999, "USD", None, Some("pm_card_visa")).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;
    db.store.load(id).await.unwrap().0
}

async fn reload(db: &TestDb, a: &Attempt) -> Attempt {
    db.store.load(a.id).await.unwrap().0
}

pub async fn seed(b: Backend) -> Seeded {
    let db = TestDb::new(b).await;
    let op1 = enqueue(&db, "op-1").await;
    let op1 = step(&db.store, &op1, Event::Claim, None).await;
    let op1 = step(&db.store, &op1, Event::Approved, Some("ch_op1")).await;
    let refund = ask_refund(&db.store, op1.id, 500, "api:app").await;
    let op2 = enqueue(&db, "op-2").await;
    let op2 = step(&db.store, &op2, Event::Claim, None).await;
    let op2 = step(&db.store, &op2, Event::Declined, Some("do_not_honor")).await;
    let retry = db
        .store
        .business_retry(op2.id, 4, "finance:test", None)
        .await
        .unwrap();
    let op3 = in_review(&db.store, "op-3").await;
    let op4 = enqueue(&db, "op-4 <b>&\"x\"").await;
    let old = enqueue(&db, "op-old").await;
    let refund_id = refund.refund_id.to_string();
    db.exec(
        "UPDATE cobro.payment_attempts SET created_at = '2026-06-01T00:00:00Z'
          WHERE order_id IN ('op-1', 'op-2') AND kind <> 'business_retry' OR id = $1::uuid",
        "UPDATE payment_attempts SET created_at = 1780272000000
          WHERE order_id IN ('op-1', 'op-2') AND kind <> 'business_retry' OR id = ?1",
        &[&refund_id],
    )
    .await
    .unwrap();
    db.exec(
        "UPDATE cobro.payment_attempts SET created_at = '2026-01-15T10:00:00Z' WHERE order_id = 'op-old'",
        "UPDATE payment_attempts SET created_at = 1768471200000 WHERE order_id = 'op-old'",
        &[],
    )
    .await
    .unwrap();
    let refund = db.store.load(refund.refund_id).await.unwrap().0;
    let retry = db.store.load(retry.attempt_id).await.unwrap().0;
    Seeded {
        op1: reload(&db, &op1).await,
        refund,
        op2: reload(&db, &op2).await,
        retry,
        op3: reload(&db, &op3).await,
        op4: reload(&db, &op4).await,
        old: reload(&db, &old).await,
        db,
    }
}

/// The ids of a page of `GET /attempts` (or `cobro attempts --json`).
pub fn ids(body: &Value) -> Vec<String> {
    body["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items: {body}"))
        .iter()
        .map(|a| a["id"].as_str().unwrap().to_owned())
        .collect()
}
