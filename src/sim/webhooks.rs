//! The simulator's webhook sender: for every charge it executes (and every
//! card update asked for on `POST /control/card-updated`), an event
//! signed with the Standard Webhooks scheme (or Stripe's, as the signer says)
//! is POSTed to a configured URL, with seeded knobs for duplicates (each
//! event N times), reordering (a random extra delay per copy) and delay.
//!
//! Invariant: a delivery is retried until it gets a 2xx or five tries have
//! failed; a 4xx is not retried (the receiver refused the event for good).
//! Every copy of an event carries the same event id and body.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::ledger::ChargeResult;
use crate::webhook::Verifier;

/// Where and how the simulator sends webhooks.
#[derive(Debug, Clone)]
pub struct WebhookTarget {
    /// e.g. `http://127.0.0.1:8080/webhooks/gateway`
    pub url: String,
    /// Signs with its first secret.
    pub signer: Verifier,
    /// Each event is delivered this many times (at least 1).
    pub copies: u32,
    /// Every copy waits this long...
    pub delay_ms: u64,
    /// ...plus a seeded random 0..=jitter_ms, which reorders events.
    pub jitter_ms: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) delivered: AtomicU64,
    pub(crate) failed: AtomicU64,
}

/// What the simulator tells the receiver about.
#[derive(Debug, Clone)]
pub(crate) enum Outgoing {
    /// An executed charge: `charge.succeeded` / `charge.failed`.
    Charge(ChargeResult),
    /// The card network updated the card behind this token (its account
    /// updater): `payment_method.updated`.
    CardUpdated(String),
}

#[derive(Debug)]
pub(crate) struct Outbox {
    tx: mpsc::UnboundedSender<Outgoing>,
    pub(crate) counters: Arc<Counters>,
}

impl Outbox {
    /// Starts the delivery task; it ends when the outbox is dropped.
    pub(crate) fn start(target: WebhookTarget, seed: u64) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let counters = Arc::new(Counters::default());
        tokio::spawn(deliver_all(target, seed, rx, counters.clone()));
        Self { tx, counters }
    }

    pub(crate) fn emit(&self, result: &ChargeResult) {
        let _ = self.tx.send(Outgoing::Charge(result.clone()));
    }

    pub(crate) fn emit_card_updated(&self, payment_method: &str) {
        let _ = self
            .tx
            .send(Outgoing::CardUpdated(payment_method.to_owned()));
    }
}

pub(crate) fn event_body(result: &ChargeResult) -> (String, Vec<u8>) {
    let id = format!("evt_{}", uuid::Uuid::new_v4().simple());
    let kind = if result.is_approved() {
        "charge.succeeded"
    } else {
        "charge.failed"
    };
    let body = json!({
        "id": id,
        "type": kind,
        "created": chrono::Utc::now().timestamp(),
        "data": {
            "charge_id": result.charge_id,
            "idempotency_key": result.idempotency_key,
            "order_id": result.order_id,
            "amount_minor": result.amount_minor,
            "currency": result.currency,
            "status": result.status,
            "decline_code": result.decline_code,
            "network_advice_code": result.network_advice_code,
        }
    });
    (id, body.to_string().into_bytes())
}

/// The simulator's account-updater event.
pub(crate) fn card_updated_body(payment_method: &str) -> (String, Vec<u8>) {
    let id = format!("evt_{}", uuid::Uuid::new_v4().simple());
    let body = json!({
        "id": id,
        "type": crate::webhook::event::CARD_UPDATED,
        "created": chrono::Utc::now().timestamp(),
        "data": { "payment_method": payment_method }
    });
    (id, body.to_string().into_bytes())
}

async fn deliver_all(
    target: WebhookTarget,
    seed: u64,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    counters: Arc<Counters>,
) {
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            warn!(error = %e, "sim: no HTTP client; webhooks disabled");
            return;
        }
    };
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5EED_0F3E_7E00);
    let target = Arc::new(target);
    while let Some(out) = rx.recv().await {
        let (id, body) = match &out {
            Outgoing::Charge(result) => event_body(result),
            Outgoing::CardUpdated(token) => card_updated_body(token),
        };
        let body = Arc::new(body);
        for _ in 0..target.copies.max(1) {
            let wait = target.delay_ms + rng.random_range(0..=target.jitter_ms);
            let (client, target, body, id, counters) = (
                client.clone(),
                target.clone(),
                body.clone(),
                id.clone(),
                counters.clone(),
            );
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(wait)).await;
                let ok = deliver(&client, &target, &id, &body).await;
                let counter = if ok {
                    &counters.delivered
                } else {
                    &counters.failed
                };
                counter.fetch_add(1, Ordering::Relaxed);
            });
        }
    }
}

async fn deliver(client: &reqwest::Client, target: &WebhookTarget, id: &str, body: &[u8]) -> bool {
    for attempt in 0..5u32 {
        let headers = target.signer.sign(id, chrono::Utc::now().timestamp(), body);
        let mut req = client
            .post(&target.url)
            .header("content-type", "application/json")
            .body(body.to_vec());
        for (name, value) in headers {
            req = req.header(name, value);
        }
        match req.send().await {
            Ok(r) if r.status().is_success() => return true,
            Ok(r) if r.status().is_client_error() => {
                warn!(event = id, status = %r.status(), "sim: webhook refused by the receiver");
                return false;
            }
            Ok(r) => debug!(event = id, status = %r.status(), attempt, "sim: webhook retry"),
            Err(e) => debug!(event = id, error = %e, attempt, "sim: webhook retry"),
        }
        tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt + 1))).await;
    }
    false
}
