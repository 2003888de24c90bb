//! The worker's side of a case: one wake-up per attempt with the gateway
//! misbehaving as the step says, a worker that vanishes mid-send, time
//! passing (a test clock, but for the gateway's processing time, waited
//! out for real where a decline of a sent attempt needs it), draining at
//! the end, and the engine's test timings.

use std::time::Duration;

use cobro::engine::{Engine, EngineConfig};
use cobro::gateway::{HttpGateway, HttpGatewayConfig};
use cobro::sim::{ChargeBody, Faults};
use cobro::state::{Event, State};
use cobro::store::{Applied, Attempt, Backend, Change, Lease};

use super::super::common;
use super::super::steps::{LATE, Net, ORDERS};
use super::{World, label};

/// How long the gateway keeps idempotency keys (Stripe's 24 h), as the
/// worker is told; [`Step::DayPasses`] ages every key past it.
pub const KEY_LIFETIME: Duration = Duration::from_secs(86_400);

/// The longest the gateway takes to show what it executed, as the worker
/// is told (`COBRO_GATEWAY_MAX_PROCESSING`): longer than a [`Net::Late`]
/// request takes, so the simulator keeps the promise; short enough that
/// [`World::time_passes`] can wait it out for real (a "not found" after it
/// confirms finance's decline of a sent attempt).
pub const MAX_PROCESSING: Duration = LATE.saturating_add(Duration::from_millis(500));

/// The lease owner of a worker that vanished mid-send.
const CRASHED: &str = "crashed";

/// The first check after an unknown outcome, and a declined charge's
/// business retry, wait this long: longer than a wake-up ever sleeps, so
/// only [`Step::TimePasses`] makes them due and a case does not depend on
/// how fast the machine runs it.
const LATER: &str = "30s";
impl World {
    /// One wake-up for each of `targets` that may have work, with the
    /// gateway behaving as `net` says meanwhile.
    pub(super) async fn wake(&mut self, targets: Vec<Attempt>, net: Net) -> String {
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
        if net == Net::Late {
            // Every request of this wake-up arrived by now.
            self.late_until = Some(tokio::time::Instant::now() + LATE);
        }
        moved.join(", ")
    }

    /// A worker claims the order's `PENDIENTE` charge, perhaps sends it,
    /// and is never heard of again. Only a charge a worker would send: not
    /// one whose key no longer guards its resend.
    pub(super) async fn crash(&mut self, order: u8, sent: bool) -> String {
        let sendable = |a: &Attempt| {
            let age = (chrono::Utc::now() - a.created_at)
                .to_std()
                .unwrap_or_default();
            let checks = a.check_count.max(0) as u32;
            cobro::policy::key_guards_resend(checks, age, KEY_LIFETIME, a.gateway_ref.is_some())
        };
        let Some(a) = self
            .candidates(order, |a| {
                !a.is_refund() && a.state == State::Pendiente && sendable(a)
            })
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
    /// and a crashed lease's expiry are written, never a state.) The
    /// transition log cannot be aged, so where finance asked to decline an
    /// attempt that was sent, the gateway's processing time passes for real
    /// first ([`MAX_PROCESSING`] since its last send, at most that long).
    pub async fn time_passes(&self) -> u64 {
        self.processing_time_passes().await;
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

    /// Waits until every attempt in review with a decline asked for was
    /// last sent [`MAX_PROCESSING`] ago.
    async fn processing_time_passes(&self) {
        let sending = State::EnProceso.as_str();
        let mut last_send = None;
        for order in 0..ORDERS {
            let attempts = self
                .db
                .store
                .attempts_for_order(&super::order_id(order))
                .await
                .unwrap();
            for a in attempts.iter().filter(|a| a.state == State::EnRevision) {
                let log = self.db.store.transitions(a.id).await.unwrap();
                if !log.iter().any(|t| t.cause == "finance_decline_requested") {
                    continue;
                }
                let sent = log.iter().rev().find(|t| t.to_state == sending);
                last_send = last_send.max(sent.map(|t| t.at));
            }
        }
        let Some(sent) = last_send else {
            return;
        };
        let since = (chrono::Utc::now() - sent).to_std().unwrap_or_default();
        if let Some(left) = MAX_PROCESSING.checked_sub(since) {
            tokio::time::sleep(left + Duration::from_millis(50)).await;
        }
    }

    /// More than a day passes: what [`World::time_passes`] does, and every
    /// attempt's key is two days old (its `created_at` moved back: the key's
    /// age, never a state).
    pub async fn day_passes(&self) -> u64 {
        let aged = "UPDATE cobro.payment_attempts SET created_at = created_at - interval '2 days'";
        let aged_lite = "UPDATE payment_attempts SET created_at = created_at - 172800000";
        let n = self.db.exec(aged, aged_lite, &[]).await.expect(aged);
        self.time_passes().await;
        n
    }

    /// Runs the workers, with the gateway healthy, until nothing is due:
    /// `Ok` once no attempt has work left, `Err` with what is still moving
    /// after `rounds` rounds.
    /// A request still executing at the gateway ([`Net::Late`]) is waited
    /// for first, so the end is judged on everything the gateway did.
    pub async fn drain(&mut self, rounds: usize) -> Result<(), String> {
        common::set_faults(&self.sim_url, &Faults::default()).await;
        if let Some(until) = self.late_until.take() {
            tokio::time::sleep_until(until + std::time::Duration::from_millis(100)).await;
        }
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
pub(super) fn has_work(a: &Attempt) -> bool {
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
        Net::Late => Faults {
            p_timeout_after_charge: 1.0,
            hold_ms: LATE.as_millis() as u64,
            record_on_complete: true,
            ..base
        },
        Net::Error503 => Faults { p_5xx: 1.0, ..base },
        Net::Throttled => Faults {
            p_503_retry_after: 1.0,
            retry_after_s: 30,
            ..base
        },
        Net::Down => Faults {
            outage: true,
            ..base
        },
    }
}

pub(super) fn retry_policy() -> cobro::retry::RetryPolicy {
    cobro::retry::RetryPolicy::parse(cobro::retry::DEFAULT_RETRYABLE, LATER, 0.0, 4)
        .expect("retry policy")
}

/// The worker: the test timings, with the first check and the business
/// retry [`LATER`] (only [`Step::TimePasses`] makes them due) and the other
/// checks at once, so checks that keep failing reach finance in one wake-up.
pub(super) fn engine(store: &cobro::store::Store, gateway_url: &str) -> Engine {
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
            key_lifetime: KEY_LIFETIME,
            retry: retry_policy(),
            defer_backoff: Duration::from_millis(100),
            not_found: cobro::policy::NotFoundRule {
                gateway_idempotent: true,
                max_processing: MAX_PROCESSING,
            },
            review: Default::default(),
        },
    )
}
