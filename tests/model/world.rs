//! One case's world: a fresh database, the gateway simulator and the web
//! process as real HTTP servers on 127.0.0.1, and a worker engine in this
//! process driven one wake-up at a time; every step goes through its real
//! door (HTTP, SQL, the store's API, signed webhooks, the finance API).
//!
//! Invariant: whatever cobro answers a step (201, a 409 or 422 refusal, an
//! SQL error, a store error) is that step's recorded outcome, never a
//! failure: only the invariants fail a case. A harness problem (a server
//! that does not answer, a status no door gives) panics.
//!
//! The steps' doors, one idea per file under `world/`: `app.rs` (the app's
//! enqueues, refunds, cancels and raw SQL), `worker.rs` (wake-ups, a
//! crashed worker, time passing, draining), `gateway.rs` (the gateway's
//! webhooks, late approvals, late refunds and refunds that fail) and `finance.rs` (finance's resolutions,
//! retries, case closes and the daily reconciliation).

#[path = "world/app.rs"]
mod app;
#[path = "world/finance.rs"]
mod finance;
#[path = "world/gateway.rs"]
mod gateway;
#[path = "world/worker.rs"]
mod worker;

use std::collections::HashMap;

use cobro::engine::Engine;
use cobro::sim::{Faults, Ledger, SimHandle};
use cobro::store::{Attempt, ReconCase, Transition};
use cobro::webhook::{Scheme, Verifier};
use serde_json::{Value, json};
use uuid::Uuid;

use super::common::{self, TestDb, Web};
use super::steps::{ORDERS, Step};
use worker::{engine, has_work, retry_policy};

fn order_id(order: u8) -> String {
    format!("order-{order}")
}

fn amount_of(order: u8) -> i64 {
    [1_099, 2_550, 4_000][usize::from(order % ORDERS)]
}

fn payment_method(order: u8) -> String {
    format!("pm_model_{order}")
}

fn short(id: Uuid) -> String {
    id.simple().to_string()[..8].to_owned()
}

/// What is left of charge `e` at the gateway: its amount less its approved refunds.
fn left_of(ledger: &Ledger, e: &cobro::sim::LedgerEntry) -> i64 {
    e.amount_minor
        - ledger
            .refunds_for_charge(&e.charge_id)
            .filter(|r| r.is_approved())
            .map(|r| r.amount_minor)
            .sum::<i64>()
}

/// An attempt as the outcomes name it: its id's first 8 digits and its order.
fn label(a: &Attempt) -> String {
    format!("{} ({})", short(a.id), a.order_id)
}

/// Everything the invariants look at, read after a step.
pub struct Snapshot {
    /// Every attempt (charges and refunds) with its transition log, in the
    /// order the model first saw them (creation order within an order).
    pub attempts: Vec<(Attempt, Vec<Transition>)>,
    pub ledger: Ledger,
    /// Every reconciliation case, open or resolved.
    pub cases: Vec<ReconCase>,
    /// When the snapshot was taken, and how long the gateway keeps keys
    /// (as the worker is told): a key older than that guards no resend.
    pub now: chrono::DateTime<chrono::Utc>,
    pub key_lifetime: std::time::Duration,
}

pub struct World {
    db: TestDb,
    sim: SimHandle,
    sim_url: String,
    web: Web,
    verifier: Verifier,
    engine: Engine,
    http: reqwest::Client,
    /// Keys that created (or found) an attempt, per order, in order of use.
    keys: Vec<Vec<Uuid>>,
    /// The delivery id first used for each ledger entry's webhook.
    delivered: HashMap<String, String>,
    deliveries: u64,
    /// Attempt ids in the order first seen.
    seen: Vec<Uuid>,
    /// When the last request a [`Net::Late`] wake-up sent has executed.
    late_until: Option<tokio::time::Instant>,
}

impl World {
    /// A world on a fresh copy of `template` (a migrated database).
    pub async fn start(template: &TestDb) -> World {
        let db = TestDb::copy_of(template).await;
        let sim = common::start_sim(true, Faults::default()).await;
        let sim_url = sim.url();
        let verifier =
            Verifier::from_env_value(Scheme::StandardWebhooks, &common::test_secret()).unwrap();
        let mut cfg = common::web_config(&db.store, verifier.clone());
        cfg.retry = retry_policy();
        let web = common::start_web_cfg(cfg).await;
        let engine = engine(&db.store, &sim_url);
        World {
            db,
            sim,
            sim_url,
            web,
            verifier,
            engine,
            http: reqwest::Client::new(),
            keys: vec![Vec::new(); usize::from(ORDERS)],
            delivered: HashMap::new(),
            deliveries: 0,
            seen: Vec::new(),
            late_until: None,
        }
    }

    pub async fn stop(self) {
        self.web.stop().await;
        self.sim.shutdown().await;
        self.db.drop_db().await;
    }

    pub async fn ledger(&self) -> Ledger {
        common::ledger(&self.sim_url).await
    }

    /// All attempts, their logs, the ledger and the cases, as they are now.
    pub async fn snapshot(&mut self) -> Snapshot {
        let mut attempts = Vec::new();
        for order in 0..ORDERS {
            attempts.extend(self.attempts(order).await);
        }
        let mut with_logs = Vec::with_capacity(attempts.len());
        for a in attempts {
            let log = self.db.store.transitions(a.id).await.unwrap();
            with_logs.push((a, log));
        }
        Snapshot {
            attempts: with_logs,
            ledger: self.ledger().await,
            cases: self.db.store.all_cases().await.unwrap(),
            now: chrono::Utc::now(),
            key_lifetime: worker::KEY_LIFETIME,
        }
    }

    /// The attempts of `order` (charges and refunds), oldest first.
    async fn attempts(&mut self, order: u8) -> Vec<Attempt> {
        let mut all = self
            .db
            .store
            .attempts_for_order(&order_id(order))
            .await
            .unwrap();
        for a in &all {
            if !self.seen.contains(&a.id) {
                self.seen.push(a.id);
            }
        }
        all.sort_by_key(|a| self.seen.iter().position(|id| *id == a.id));
        all
    }

    async fn charges(&mut self, order: u8) -> Vec<Attempt> {
        let mut all = self.attempts(order).await;
        all.retain(|a| !a.is_refund());
        all
    }

    /// The attempts of `order` that `wanted` keeps; when there are none,
    /// those of the next order that has some (a step that names an order
    /// acts on another one rather than on nothing).
    async fn candidates(&mut self, order: u8, wanted: impl Fn(&Attempt) -> bool) -> Vec<Attempt> {
        for k in 0..ORDERS {
            let found: Vec<Attempt> = self
                .attempts((order + k) % ORDERS)
                .await
                .into_iter()
                .filter(|a| wanted(a))
                .collect();
            if !found.is_empty() {
                return found;
            }
        }
        Vec::new()
    }

    /// Runs `step` through its door; the outcome, for the report.
    pub async fn exec(&mut self, step: &Step) -> String {
        match *step {
            Step::EnqueueHttp { order, key } => self.enqueue_http(order, key).await,
            Step::EnqueueSql { order, key } => self.enqueue_sql(order, key).await,
            Step::Wake { order, net } => {
                let targets = self.candidates(order, has_work).await;
                self.wake(targets, net).await
            }
            Step::RunDue { net } => {
                let mut targets = Vec::new();
                for order in 0..ORDERS {
                    targets.extend(self.attempts(order).await);
                }
                self.wake(targets, net).await
            }
            Step::Crash { order, sent } => self.crash(order, sent).await,
            Step::TimePasses => format!("{} made due", self.time_passes().await),
            Step::DayPasses => format!("{} keys aged two days", self.day_passes().await),
            Step::Webhook {
                pick,
                replay,
                crossed,
            } => self.webhook(pick, replay, crossed).await,
            Step::LateApproval { order } => self.late_approval(order).await,
            Step::LateRefund { order } => self.late_refund(order).await,
            Step::RefundFails { order } => self.refund_fails(order).await,
            Step::Resolve {
                order,
                check_now,
                hasty,
            } => self.resolve(order, check_now, hasty).await,
            Step::FinanceRetry { order, pick } => self.finance_retry(order, pick).await,
            Step::CloseCase { pick } => self.close_case(pick).await,
            Step::Reconcile => self.reconcile().await,
            Step::Cancel { order, reason } => self.cancel(order, reason).await,
            Step::Refund { order, part, http } => self.refund(order, part, http).await,
            Step::RawReopen { order, pick } => self.raw_reopen(order, pick).await,
        }
    }
}

/// A door's answer: its status, its JSON body ([`answer`]), and whether it
/// was a replay of a first answer (`Idempotent-Replayed`).
struct Answered {
    status: u16,
    body: Value,
    replayed: bool,
}

impl World {
    /// `POST path` on the gateway simulator's control API (a test facility
    /// a real gateway does not have) with `body`: its answer, which must be
    /// a success.
    async fn control<T: serde::de::DeserializeOwned>(&self, path: &str, body: &Value) -> T {
        let resp = self
            .http
            .post(format!("{}{path}", self.sim_url))
            .json(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        let status = resp.status();
        assert!(status.is_success(), "POST {path}: {status}");
        resp.json()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"))
    }

    /// `POST path` on the web process as `who` (a test key, by name), with
    /// `key` as its `Idempotency-Key` when given.
    async fn post(
        &self,
        who: &str,
        path: &str,
        key: Option<String>,
        body: &Value,
        expected: &[u16],
    ) -> Answered {
        let mut req = self
            .http
            .post(format!("{}{path}", self.web.url))
            .bearer_auth(common::secret(who))
            .json(body);
        if let Some(key) = key {
            req = req.header("Idempotency-Key", key);
        }
        let resp = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        let replayed = resp.headers().contains_key("idempotent-replayed");
        let (status, body) = answer(resp, expected).await;
        Answered {
            status,
            body,
            replayed,
        }
    }
}

/// Status and JSON body of a door's answer. A status outside `expected`
/// that is a server error (5xx) is recorded as the outcome, flagged; any
/// other is a harness problem (a wrong route, key or body). So is, flagged,
/// a refusal by a database rule the route's own check did not meet first
/// (its body names the rule's `code`): the code and the database disagree.
async fn answer(resp: reqwest::Response, expected: &[u16]) -> (u16, Value) {
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    assert!(
        expected.contains(&status) || status >= 500,
        "unexpected HTTP {status} (expected one of {expected:?}): {body}"
    );
    if status >= 500 && !expected.contains(&status) {
        let flagged = json!({ "error": format!("SERVER ERROR {status}: {body}") });
        return (status, flagged);
    }
    if body.get("code").is_some() {
        let flagged = json!({ "error": format!("RULE REFUSAL {status}: {body}") });
        return (status, flagged);
    }
    (status, body)
}

fn db_message(e: &sqlx::Error) -> String {
    match e.as_database_error() {
        Some(d) => d.message().to_owned(),
        None => e.to_string(),
    }
}
