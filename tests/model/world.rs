//! One case's world: a fresh database, the gateway simulator and the web
//! process as real HTTP servers on 127.0.0.1, and a worker engine in this
//! process driven one wake-up at a time; every step goes through its real
//! door (HTTP, SQL, the store's API, signed webhooks, the finance API).
//!
//! Invariant: whatever cobro answers a step (201, a 409 or 422 refusal, an
//! SQL error, a store error) is that step's recorded outcome, never a
//! failure: only the invariants fail a case. A harness problem (a server
//! that does not answer, a status no door gives) panics.

use std::collections::HashMap;
use std::time::Duration;

use cobro::domain::{Amount, ChargeRequest, IdempotencyKey};
use cobro::engine::{Engine, EngineConfig};
use cobro::gateway::{HttpGateway, HttpGatewayConfig};
use cobro::sim::{ChargeBody, Faults, Ledger, LedgerEntry, SimHandle};
use cobro::state::{Event, State};
use cobro::store::{Applied, Attempt, Backend, Change, Lease, ReconCase, Transition};
use cobro::webhook::{Scheme, Verifier};
use serde_json::{Value, json};
use uuid::Uuid;

use super::common::{self, TestDb, Web};
use super::steps::{Key, Net, ORDERS, Part, Step};

/// The lease owner of a worker that vanished mid-send.
const CRASHED: &str = "crashed";

/// The first check after an unknown outcome, and a declined charge's
/// business retry, wait this long: longer than a wake-up ever sleeps, so
/// only [`Step::TimePasses`] makes them due and a case does not depend on
/// how fast the machine runs it.
const LATER: &str = "30s";

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
            Step::Webhook { pick, replay } => self.webhook(pick, replay).await,
            Step::LateApproval { order } => self.late_approval(order).await,
            Step::Resolve { order, check_now } => self.resolve(order, check_now).await,
            Step::FinanceRetry { order, pick } => self.finance_retry(order, pick).await,
            Step::CloseCase { pick } => self.close_case(pick).await,
            Step::Cancel { order, reason } => {
                let resp = self
                    .http
                    .post(format!(
                        "{}/orders/{}/cancel",
                        self.web.url,
                        order_id(order)
                    ))
                    .bearer_auth(common::secret("app"))
                    .json(&json!({ "reason": reason.as_str() }))
                    .send()
                    .await
                    .expect("POST /orders/{id}/cancel");
                let (status, body) = answer(resp, &[200, 404, 409]).await;
                match status {
                    200 => format!(
                        "200 cancelled {} stopped {}",
                        body["attempts_cancelled"], body["retries_stopped"]
                    ),
                    _ => format!("{status} {}", body["error"]),
                }
            }
            Step::Refund { order, part, http } => self.refund(order, part, http).await,
            Step::RawReopen { order, pick } => self.raw_reopen(order, pick).await,
        }
    }

    fn key(&self, order: u8, key: Key) -> Uuid {
        let used = &self.keys[usize::from(order)];
        match key {
            Key::Replay(n) if !used.is_empty() => used[usize::from(n) % used.len()],
            Key::Replay(_) | Key::New => Uuid::new_v4(),
        }
    }

    fn remember(&mut self, order: u8, key: Uuid) {
        let used = &mut self.keys[usize::from(order)];
        if !used.contains(&key) {
            used.push(key);
        }
    }

    async fn enqueue_http(&mut self, order: u8, key: Key) -> String {
        let key = self.key(order, key);
        let resp = self
            .http
            .post(format!("{}/charges", self.web.url))
            .bearer_auth(common::secret("app"))
            .header("Idempotency-Key", key.to_string())
            .json(&json!({
                "order_id": order_id(order),
                "amount_minor": amount_of(order),
                "currency": "EUR",
                "payment_method": payment_method(order),
            }))
            .send()
            .await
            .expect("POST /charges");
        let replayed = resp.headers().contains_key("idempotent-replayed");
        let (status, body) = answer(resp, &[201, 409, 422]).await;
        if status != 201 {
            return format!("{status} {}", body["error"]);
        }
        self.remember(order, key);
        let id: Uuid = body["attempt_id"].as_str().unwrap().parse().unwrap();
        format!(
            "201 attempt {}{}",
            short(id),
            if replayed { " (replayed)" } else { "" }
        )
    }

    async fn enqueue_sql(&mut self, order: u8, key: Key) -> String {
        let key = self.key(order, key);
        let (oid, pm) = (order_id(order), payment_method(order));
        let done: Result<(Uuid, bool), String> = match self.db.backend {
            Backend::Postgres => {
                let pool = self.db.store.pg_pool().unwrap();
                let mut tx = pool.begin().await.unwrap();
                let row: Result<(Uuid, bool), sqlx::Error> = sqlx::query_as(
                    "SELECT attempt_id, created FROM cobro.enqueue_charge($1, $2, $3, $4, $5)",
                )
                .bind(&oid)
                .bind(amount_of(order))
                .bind("EUR")
                .bind(key)
                .bind(&pm)
                .fetch_one(&mut *tx)
                .await;
                match row {
                    Ok(r) => {
                        tx.commit().await.unwrap();
                        Ok(r)
                    }
                    Err(e) => Err(format!("SQL error: {}", db_message(&e))),
                }
            }
            Backend::Sqlite => {
                let req = ChargeRequest::parse(
                    &oid,
                    amount_of(order),
                    "EUR",
                    Some(&key.to_string()),
                    Some(&pm),
                )
                .unwrap();
                let pool = self.db.store.sqlite_pool().unwrap();
                let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.unwrap();
                match cobro::store::enqueue_charge_sqlite(&mut tx, &req).await {
                    Ok(e) => {
                        tx.commit().await.unwrap();
                        Ok((e.attempt_id, e.created))
                    }
                    Err(e) => Err(format!("refused: {e}")),
                }
            }
        };
        match done {
            Ok((id, created)) => {
                self.remember(order, key);
                format!(
                    "attempt {}{}",
                    short(id),
                    if created { "" } else { " (existing)" }
                )
            }
            Err(refused) => refused,
        }
    }

    /// One wake-up for each of `targets` that may have work, with the
    /// gateway behaving as `net` says meanwhile.
    async fn wake(&mut self, targets: Vec<Attempt>, net: Net) -> String {
        let targets: Vec<Attempt> = targets.into_iter().filter(has_work).collect();
        if targets.is_empty() {
            return "nothing to wake".into();
        }
        if net != Net::Clean {
            common::set_faults(&self.sim_url, &faults(net)).await;
        }
        let mut moved = Vec::new();
        for a in targets {
            let result = self.engine.process(a.id).await;
            let (now, _) = self.db.store.load(a.id).await.unwrap();
            let mut line = format!("{} {}->{}", label(&a), a.state, now.state);
            if let Err(e) = result {
                line.push_str(&format!(" (error: {e})"));
            }
            moved.push(line);
        }
        if net != Net::Clean {
            common::set_faults(&self.sim_url, &Faults::default()).await;
        }
        moved.join(", ")
    }

    /// A worker claims the order's `PENDIENTE` charge, perhaps sends it,
    /// and is never heard of again.
    async fn crash(&mut self, order: u8, sent: bool) -> String {
        let Some(a) = self
            .candidates(order, |a| !a.is_refund() && a.state == State::Pendiente)
            .await
            .into_iter()
            .next()
        else {
            return "no PENDIENTE charge".into();
        };
        let mut claim = Change::new(Some(Event::Claim), "claim", "worker:crashed");
        claim.lease = Lease::Take {
            owner: CRASHED,
            ttl: Duration::from_secs(3600),
        };
        claim.add_send = true;
        match self.db.store.apply(&a, &claim).await {
            Ok(Applied::Moved(_)) => {}
            Ok(Applied::Lost) => return "lost the claim".into(),
            Err(e) => return format!("claim refused: {e}"),
        }
        if !sent {
            return format!("{} claimed, never sent", label(&a));
        }
        let resp = self
            .http
            .post(format!("{}/v1/charges", self.sim_url))
            .header("Idempotency-Key", a.idempotency_key.to_string())
            .json(&ChargeBody {
                order_id: a.order_id.clone(),
                amount_minor: a.amount_minor,
                currency: a.currency.clone(),
                payment_method: a.payment_method.clone(),
            })
            .send()
            .await
            .expect("POST /v1/charges");
        format!(
            "{} claimed, sent (gateway: {}), answer never recorded",
            label(&a),
            resp.status().as_u16()
        )
    }

    /// Every scheduled time has come: due times move to now, and the lease
    /// of a vanished worker runs out. (A test clock: only `next_action_at`
    /// and a crashed lease's expiry are written, never a state.)
    pub async fn time_passes(&self) -> u64 {
        let (due, leases) = match self.db.backend {
            Backend::Postgres => (
                "UPDATE cobro.payment_attempts SET next_action_at = now() - interval '1 millisecond'
                  WHERE next_action_at > now() AND lease_owner IS NULL",
                "UPDATE cobro.payment_attempts SET lease_expires_at = now() - interval '1 millisecond'
                  WHERE lease_owner = $1 AND lease_expires_at > now()",
            ),
            Backend::Sqlite => (
                "UPDATE payment_attempts
                    SET next_action_at = CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) - 1
                  WHERE next_action_at > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
                    AND lease_owner IS NULL",
                "UPDATE payment_attempts
                    SET lease_expires_at = CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) - 1
                  WHERE lease_owner = ?1
                    AND lease_expires_at > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
            ),
        };
        let n = self.db.exec(due, due, &[]).await.expect(due);
        n + self
            .db
            .exec(leases, leases, &[CRASHED])
            .await
            .expect(leases)
    }

    /// The webhook of one entry of the gateway's ledger (charges, then refunds).
    async fn webhook(&mut self, pick: u8, replay: bool) -> String {
        let ledger = self.ledger().await;
        let n = ledger.entries.len() + ledger.refunds.len();
        if n == 0 {
            return "the gateway has sent nothing yet".into();
        }
        let i = usize::from(pick) % n;
        match ledger.entries.get(i) {
            Some(e) => self.deliver_charge(e, replay).await,
            None => {
                let r = &ledger.refunds[i - ledger.entries.len()];
                let data = json!({
                    "charge_id": r.refund_id, "idempotency_key": r.idempotency_key,
                    "order_id": r.order_id, "amount_minor": r.amount_minor,
                    "currency": r.currency, "status": r.status, "decline_code": r.decline_code,
                });
                let id = format!("re:{}", r.seq);
                self.deliver(&id, r.is_approved(), data, replay).await
            }
        }
    }

    async fn deliver_charge(&mut self, e: &LedgerEntry, replay: bool) -> String {
        let data = json!({
            "charge_id": e.charge_id, "idempotency_key": e.idempotency_key,
            "order_id": e.order_id, "amount_minor": e.amount_minor,
            "currency": e.currency, "status": e.status, "decline_code": e.decline_code,
        });
        let id = format!("ch:{}", e.seq);
        self.deliver(&id, e.is_approved(), data, replay).await
    }

    /// Signs and POSTs the event about ledger entry `entry` to the web process.
    async fn deliver(&mut self, entry: &str, approved: bool, data: Value, replay: bool) -> String {
        let event_id = match self.delivered.get(entry) {
            Some(first) if replay => first.clone(),
            _ => {
                self.deliveries += 1;
                let id = format!("evt_model_{}", self.deliveries);
                self.delivered
                    .entry(entry.to_owned())
                    .or_insert_with(|| id.clone());
                id
            }
        };
        let kind = if approved {
            "charge.succeeded"
        } else {
            "charge.failed"
        };
        let now = chrono::Utc::now().timestamp();
        let body =
            json!({ "id": event_id, "type": kind, "created": now, "data": data }).to_string();
        let mut req = self
            .http
            .post(format!("{}/webhooks/gateway", self.web.url))
            .header("content-type", "application/json")
            .body(body.clone());
        for (k, v) in self.verifier.sign(&event_id, now, body.as_bytes()) {
            req = req.header(k, v);
        }
        let resp = req.send().await.expect("POST /webhooks/gateway");
        let (status, reply) = answer(resp, &[200, 400, 409, 422]).await;
        format!(
            "{kind} {entry} as {event_id}: {status} {}",
            reply["outcome"]["result"].as_str().unwrap_or("")
        )
    }

    /// The gateway approves, late, what it had declined under the key of
    /// the order's latest attempt (or the next order's, if that one's
    /// latest was not declined by the gateway), and sends
    /// `charge.succeeded`.
    async fn late_approval(&mut self, order: u8) -> String {
        let ledger = self.ledger().await;
        let mut found = None;
        for k in 0..ORDERS {
            let Some(latest) = self.charges((order + k) % ORDERS).await.pop() else {
                continue;
            };
            let key = latest.idempotency_key.to_string();
            let declined_there = ledger.entries_for_key(&key).next().is_some()
                && ledger.entries_for_key(&key).all(|e| !e.is_approved());
            if latest.state == State::Rechazado && declined_there {
                found = Some((latest, key));
                break;
            }
        }
        let Some((latest, key)) = found else {
            return "no order's latest charge was declined by the gateway".into();
        };
        let resp = self
            .http
            .post(format!("{}/control/inject", self.sim_url))
            .json(&json!({
                "kind": "charge", "idempotency_key": key, "order_id": latest.order_id,
                "amount_minor": latest.amount_minor, "currency": latest.currency,
            }))
            .send()
            .await
            .expect("POST /control/inject");
        assert!(resp.status().is_success(), "inject: {}", resp.status());
        let entry: LedgerEntry = resp.json().await.expect("injected entry");
        let news = self.deliver_charge(&entry, false).await;
        format!(
            "the gateway approved {} late as {}; {news}",
            label(&latest),
            entry.charge_id
        )
    }

    /// Finance decides the order's attempt in doubt by the gateway's ledger.
    async fn resolve(&mut self, order: u8, check_now: bool) -> String {
        let Some(a) = self
            .candidates(order, |a| {
                matches!(a.state, State::Desconocido | State::EnRevision)
            })
            .await
            .into_iter()
            .next()
        else {
            return "nothing in doubt".into();
        };
        let ledger = self.ledger().await;
        let key = a.idempotency_key.to_string();
        // What the gateway's dashboard shows under the attempt's key:
        // approved (with its id), declined, or nothing.
        let (approved, declined) = if a.is_refund() {
            let mut there = ledger.refunds.iter().filter(|r| r.idempotency_key == key);
            let approved = there
                .clone()
                .find(|r| r.is_approved())
                .map(|r| r.refund_id.clone());
            (approved, there.any(|r| !r.is_approved()))
        } else {
            let approved = ledger
                .entries_for_key(&key)
                .find(|e| e.is_approved())
                .map(|e| e.charge_id.clone());
            (
                approved,
                ledger.entries_for_key(&key).any(|e| !e.is_approved()),
            )
        };
        let version = a.version;
        let body = match (check_now, approved) {
            (false, Some(id)) => json!({"action": "approve", "version": version,
                                        "charge_id": id, "note": "model: seen in the dashboard"}),
            // A charge the gateway never executed is not charged: declined.
            // A refund is the customer's money: finance does not turn one
            // down that the gateway did not decline; it has it looked up
            // again (and re-sent when not found).
            (false, None) if declined || !a.is_refund() => {
                json!({"action": "decline", "version": version,
                       "code": "not_at_gateway", "note": "model: not in the dashboard"})
            }
            _ => json!({"action": "check_now", "version": version, "note": "model: look again"}),
        };
        let resp = self
            .http
            .post(format!(
                "{}/finance/api/attempts/{}/resolve",
                self.web.url, a.id
            ))
            .bearer_auth(common::secret("ana"))
            .json(&body)
            .send()
            .await
            .expect("POST /finance/api/attempts/{id}/resolve");
        // 202: a decline asked for (a payment object that may still succeed).
        let (status, reply) = answer(resp, &[200, 202, 404, 409, 422]).await;
        let what = body["action"].as_str().unwrap_or("");
        match status {
            200 => format!("{what} {} {}: now {}", label(&a), a.state, reply["state"]),
            _ => format!("{what} {}: {status} {}", label(&a), reply["error"]),
        }
    }

    async fn finance_retry(&mut self, order: u8, pick: u8) -> String {
        let declined = self
            .candidates(order, |a| !a.is_refund() && a.state == State::Rechazado)
            .await;
        if declined.is_empty() {
            return "no declined charge".into();
        }
        let a = &declined[usize::from(pick) % declined.len()];
        let resp = self
            .http
            .post(format!(
                "{}/finance/api/attempts/{}/retry",
                self.web.url, a.id
            ))
            .bearer_auth(common::secret("luis"))
            .json(&json!({}))
            .send()
            .await
            .expect("POST /finance/api/attempts/{id}/retry");
        // 202: the declined attempt's retry is due now; a worker step looks
        // it up and makes the new attempt (if the rule still allows it).
        let (status, reply) = answer(resp, &[202, 404, 409, 422]).await;
        match status {
            202 => format!(
                "retry of {}: 202 requested, number {} key {}",
                label(a),
                reply["attempt_number"],
                reply["idempotency_key"]
                    .as_str()
                    .map_or("?".into(), |s| s[..8].to_owned())
            ),
            _ => format!("retry of {}: {status} {}", label(a), reply["error"]),
        }
    }

    /// Finance closes an open case the honest way: what the case says the
    /// gateway charged and we do not hold as charged, it first refunds in
    /// the gateway's dashboard (whatever is left of it); then it closes the
    /// case with a note saying so.
    async fn close_case(&mut self, pick: u8) -> String {
        let open = self.db.store.open_cases().await.unwrap();
        if open.is_empty() {
            return "no open case".into();
        }
        let c = &open[usize::from(pick) % open.len()];
        let ledger = self.ledger().await;
        let mut ours = Vec::new();
        for order in 0..ORDERS {
            ours.extend(self.charges(order).await);
        }
        let mut refunded = Vec::new();
        for id in c.gateway_ref.as_deref().unwrap_or("").split(',') {
            let Some(e) = ledger
                .entries
                .iter()
                .find(|e| e.charge_id == id.trim() && e.is_approved())
            else {
                continue;
            };
            let held = ours.iter().any(|a| {
                a.idempotency_key.to_string() == e.idempotency_key && a.state == State::Aprobado
            });
            let left = e.amount_minor
                - ledger
                    .refunds_for_charge(&e.charge_id)
                    .filter(|r| r.is_approved())
                    .map(|r| r.amount_minor)
                    .sum::<i64>();
            if held || left <= 0 {
                continue;
            }
            let resp = self
                .http
                .post(format!("{}/control/inject", self.sim_url))
                .json(&json!({
                    "kind": "refund", "charge_id": e.charge_id, "order_id": e.order_id,
                    "amount_minor": left, "currency": e.currency,
                }))
                .send()
                .await
                .expect("POST /control/inject");
            assert!(resp.status().is_success(), "inject: {}", resp.status());
            refunded.push(format!("{} ({left})", e.charge_id));
        }
        let note = match refunded.is_empty() {
            true => "model: checked in the gateway dashboard, nothing to do".to_owned(),
            false => format!(
                "model: refunded {} in the gateway dashboard",
                refunded.join(", ")
            ),
        };
        let resp = self
            .http
            .post(format!(
                "{}/finance/api/cases/{}/resolve",
                self.web.url, c.id
            ))
            .bearer_auth(common::secret("ana"))
            .json(&json!({ "note": note }))
            .send()
            .await
            .expect("POST /finance/api/cases/{id}/resolve");
        let (status, reply) = answer(resp, &[200, 404, 409, 422]).await;
        format!(
            "case {} ({}): {status} {}{}",
            c.id,
            c.kind,
            note,
            match status {
                200 => String::new(),
                _ => format!(": {}", reply["error"]),
            }
        )
    }

    async fn refund(&mut self, order: u8, part: Part, http: bool) -> String {
        // The approved charge (of this order, else of the next one that has
        // one); with none anywhere, the order's latest charge, to be refused.
        let mut approved = self
            .candidates(order, |a| !a.is_refund() && a.state == State::Aprobado)
            .await;
        let Some(charge) = approved.pop().or(self.charges(order).await.pop()) else {
            return "no charge".into();
        };
        let minor = match part {
            Part::Full => charge.amount_minor,
            Part::Half => (charge.amount_minor / 2).max(1),
            Part::Cent => 1,
        };
        let key = IdempotencyKey::generate();
        if !http {
            return match self
                .db
                .store
                .request_refund(charge.id, Amount::parse(minor).unwrap(), key, "app")
                .await
            {
                Ok(r) => format!(
                    "refund {} of {minor} of {} asked",
                    short(r.refund_id),
                    label(&charge)
                ),
                Err(e) => format!("refund of {}: refused: {e}", label(&charge)),
            };
        }
        let resp = self
            .http
            .post(format!("{}/refunds", self.web.url))
            .bearer_auth(common::secret("app"))
            .header("Idempotency-Key", key.to_string())
            .json(&json!({ "attempt_id": charge.id, "amount_minor": minor }))
            .send()
            .await
            .expect("POST /refunds");
        let (status, reply) = answer(resp, &[201, 404, 409, 422]).await;
        match status {
            201 => format!(
                "201 refund {} of {minor} of {}",
                reply["refund_id"]
                    .as_str()
                    .map_or("?".into(), |s| s[..8].to_owned()),
                label(&charge)
            ),
            _ => format!("refund of {}: {status} {}", label(&charge), reply["error"]),
        }
    }

    /// The app's raw SQL: a settled attempt back to `PENDIENTE`.
    async fn raw_reopen(&mut self, order: u8, pick: u8) -> String {
        let settled = self.candidates(order, |a| a.state.is_terminal()).await;
        if settled.is_empty() {
            return "nothing settled".into();
        }
        let a = &settled[usize::from(pick) % settled.len()];
        let sql = self.db.sql(
            "UPDATE cobro.payment_attempts SET state = 'PENDIENTE', version = version + 1
              WHERE id = $1::uuid AND state IN ('APROBADO', 'RECHAZADO')",
            "UPDATE payment_attempts SET state = 'PENDIENTE', version = version + 1
              WHERE id = ?1 AND state IN ('APROBADO', 'RECHAZADO')",
        );
        match self.db.exec(sql, sql, &[&a.id.to_string()]).await {
            Ok(n) => format!("{} {} -> PENDIENTE: {n} row", label(a), a.state),
            Err(e) => format!("{} {}: SQL error: {}", label(a), a.state, db_message(&e)),
        }
    }

    /// Runs the workers, with the gateway healthy, until nothing is due:
    /// `Ok` once no attempt has work left, `Err` with what is still moving
    /// after `rounds` rounds.
    pub async fn drain(&mut self, rounds: usize) -> Result<(), String> {
        common::set_faults(&self.sim_url, &Faults::default()).await;
        for _ in 0..rounds {
            self.time_passes().await;
            let mut all = Vec::new();
            for order in 0..ORDERS {
                all.extend(self.attempts(order).await);
            }
            if !all
                .iter()
                .any(|a| has_work(a) && a.state != State::EnRevision)
            {
                return Ok(());
            }
            self.wake(all, Net::Clean).await;
        }
        let mut left = Vec::new();
        for order in 0..ORDERS {
            for a in self.attempts(order).await {
                if has_work(&a) && a.state != State::EnRevision {
                    left.push(format!("{} {}", label(&a), a.state));
                }
            }
        }
        match left.is_empty() {
            true => Ok(()),
            false => Err(format!(
                "after {rounds} rounds of the workers with a healthy gateway, still moving: {}",
                left.join(", ")
            )),
        }
    }
}

/// Whether a worker may have something to do for `a` now or later.
fn has_work(a: &Attempt) -> bool {
    match a.state {
        State::Pendiente | State::EnProceso | State::Desconocido => true,
        State::Rechazado | State::EnRevision => a.next_action_at.is_some(),
        State::Aprobado => false,
    }
}

/// The simulator's faults for `net`.
fn faults(net: Net) -> Faults {
    let base = Faults::default();
    match net {
        Net::Clean => base,
        Net::Decline(code) => Faults {
            p_decline: 1.0,
            decline_codes: vec![code.as_str().into()],
            ..base
        },
        Net::LoseAnswer => Faults {
            p_response_lost: 1.0,
            ..base
        },
        Net::LoseAnswerAndLookups => Faults {
            p_response_lost: 1.0,
            p_lookup_fail: 1.0,
            ..base
        },
        Net::Timeout => Faults {
            p_timeout_after_charge: 1.0,
            hold_ms: 700,
            ..base
        },
        Net::Error503 => Faults { p_5xx: 1.0, ..base },
        Net::Down => Faults {
            outage: true,
            ..base
        },
    }
}

/// Status and JSON body of a door's answer. A status outside `expected`
/// that is a server error (5xx) is recorded as the outcome, flagged; any
/// other is a harness problem (a wrong route, key or body).
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
    (status, body)
}

fn db_message(e: &sqlx::Error) -> String {
    match e.as_database_error() {
        Some(d) => d.message().to_owned(),
        None => e.to_string(),
    }
}

fn retry_policy() -> cobro::retry::RetryPolicy {
    cobro::retry::RetryPolicy::parse(cobro::retry::DEFAULT_RETRYABLE, LATER, 0.0, 4)
        .expect("retry policy")
}

/// The worker: the test timings, with the first check and the business
/// retry [`LATER`] (only [`Step::TimePasses`] makes them due) and the other
/// checks at once, so checks that keep failing reach finance in one wake-up.
fn engine(store: &cobro::store::Store, gateway_url: &str) -> Engine {
    let gateway = HttpGateway::new(HttpGatewayConfig {
        base_url: gateway_url.into(),
        connect_timeout: Duration::from_millis(300),
        request_timeout: Duration::from_millis(400),
        ca_file: None,
    })
    .unwrap();
    let schedule = format!("{LATER},20ms,20ms,20ms,20ms");
    Engine::new(
        store.clone(),
        std::sync::Arc::new(gateway),
        EngineConfig {
            worker_name: "model".into(),
            lease_ttl: Duration::from_secs(3),
            schedule: cobro::backoff::CheckSchedule::parse(&schedule, 0.0).unwrap(),
            key_lifetime: Duration::from_secs(86_400),
            retry: retry_policy(),
            defer_backoff: Duration::from_millis(100),
            not_found: cobro::policy::NotFoundRule {
                gateway_idempotent: true,
                max_processing: Duration::from_secs(60),
            },
            review: Default::default(),
        },
    )
}
