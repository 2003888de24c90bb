//! The gateway's side of a case: the signed webhook of any entry of its
//! ledger (charges, then refunds; delivered again under the same event id
//! when replayed), and a late approval of what it had declined, told by
//! webhook in the same step (of an order's latest charge, or of the one
//! before a retry not yet sent), and a late refund (one cobro holds
//! declined, on finance's word confirmed by the review janitor, that the
//! gateway makes past the processing time it promised), and a refund that
//! fails after it succeeded (the card's bank returned the money). A crossed webhook
//! carries one entry's news under the key of an attempt of another order: a
//! gateway's bug, or a stranger with the signing secret.

use cobro::sim::{LedgerEntry, RefundEntry};
use cobro::state::State;
use serde_json::{Value, json};

use super::super::steps::ORDERS;
use super::{World, answer, label, left_of};

impl World {
    /// The webhook of one entry of the gateway's ledger (charges, then
    /// refunds); `crossed`, under another order's attempt's key.
    pub(super) async fn webhook(&mut self, pick: u8, replay: bool, crossed: bool) -> String {
        let ledger = self.ledger().await;
        let n = ledger.entries.len() + ledger.refunds.len();
        if n == 0 {
            return "the gateway has sent nothing yet".into();
        }
        let i = usize::from(pick) % n;
        let (id, approved, mut data) = match ledger.entries.get(i) {
            Some(e) => (format!("ch:{}", e.seq), e.is_approved(), charge_news(e)),
            None => {
                let r = &ledger.refunds[i - ledger.entries.len()];
                (format!("re:{}", r.seq), r.is_approved(), refund_news(r))
            }
        };
        if !crossed {
            return self.deliver(&id, approved, data, replay).await;
        }
        let its_order = data["order_id"].as_str().unwrap_or("").to_owned();
        let other = self
            .candidates(pick, |a| a.order_id != its_order)
            .await
            .into_iter()
            .next();
        let Some(other) = other else {
            return "no attempt of another order to cross the news onto".into();
        };
        data["idempotency_key"] = json!(other.idempotency_key.to_string());
        let news = self
            .deliver(&format!("crossed {id}"), approved, data, false)
            .await;
        format!("{id}'s news under the key of {}: {news}", label(&other))
    }

    async fn deliver_charge(&mut self, e: &LedgerEntry, replay: bool) -> String {
        let id = format!("ch:{}", e.seq);
        self.deliver(&id, e.is_approved(), charge_news(e), replay)
            .await
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
    /// the order's latest attempt, or of the one before it while the latest
    /// waits unsent (`PENDIENTE`, nothing under its key at the gateway: a
    /// business retry not yet charged, which cobro must now hold), or the
    /// next order's if that one has neither; and sends `charge.succeeded`.
    pub(super) async fn late_approval(&mut self, order: u8) -> String {
        let ledger = self.ledger().await;
        let declined_there = |key: &str| {
            ledger.entries_for_key(key).next().is_some()
                && ledger.entries_for_key(key).all(|e| !e.is_approved())
        };
        let mut found = None;
        for k in 0..ORDERS {
            let mut charges = self.charges((order + k) % ORDERS).await;
            let Some(mut latest) = charges.pop() else {
                continue;
            };
            let unsent = |a: &cobro::store::Attempt| {
                a.state == State::Pendiente
                    && ledger
                        .entries_for_key(&a.idempotency_key.to_string())
                        .next()
                        .is_none()
            };
            if unsent(&latest) {
                match charges.pop() {
                    Some(before) => latest = before,
                    None => continue,
                }
            }
            let key = latest.idempotency_key.to_string();
            if latest.state == State::Rechazado && declined_there(&key) {
                found = Some((latest, key));
                break;
            }
        }
        let Some((latest, key)) = found else {
            return "no order's latest charge (or the one before an unsent retry) was declined by the gateway".into();
        };
        let entry: LedgerEntry = self
            .control(
                "/control/inject",
                &json!({
                    "kind": "charge", "idempotency_key": key, "order_id": latest.order_id,
                    "amount_minor": latest.amount_minor, "currency": latest.currency,
                }),
            )
            .await;
        let news = self.deliver_charge(&entry, false).await;
        format!(
            "the gateway approved {} late as {}; {news}",
            label(&latest),
            entry.charge_id
        )
    }

    /// The gateway makes, late, the refund of a refund attempt held
    /// `RECHAZADO` (of the order, or the next order's) that was sent and of
    /// which its ledger shows nothing, when what is left of the refunded
    /// charge at the gateway covers it (a gateway refunds no more than was
    /// captured); and sends `charge.succeeded` with the refund's id.
    pub(super) async fn late_refund(&mut self, order: u8) -> String {
        let ledger = self.ledger().await;
        let nothing_there = |key: &str| !ledger.refunds.iter().any(|r| r.idempotency_key == key);
        let declined = self
            .candidates(order, |a| {
                a.is_refund()
                    && a.state == State::Rechazado
                    && a.send_count > 0
                    && nothing_there(&a.idempotency_key.to_string())
            })
            .await;
        let mut found = None;
        for refund in declined {
            let charge_id = match (&refund.refund_of_gateway, refund.refund_of) {
                (Some(id), _) => Some(id.clone()),
                (None, Some(of)) => self.db.store.load(of).await.unwrap().0.gateway_charge_id,
                (None, None) => None,
            };
            let Some(charge) = charge_id.and_then(|id| {
                ledger
                    .entries
                    .iter()
                    .find(|e| e.charge_id == id && e.is_approved())
            }) else {
                continue;
            };
            if refund.amount_minor <= left_of(&ledger, charge) {
                found = Some((refund, charge.charge_id.clone()));
                break;
            }
        }
        let Some((refund, charge_id)) = found else {
            return "no refund held RECHAZADO after it was sent that the gateway could still make"
                .into();
        };
        let key = refund.idempotency_key.to_string();
        let made: RefundEntry = self
            .control(
                "/control/inject",
                &json!({
                    "kind": "refund", "idempotency_key": key, "charge_id": charge_id,
                    "order_id": refund.order_id, "amount_minor": refund.amount_minor,
                    "currency": refund.currency,
                }),
            )
            .await;
        let news = self
            .deliver(&format!("re:{}", made.seq), true, refund_news(&made), false)
            .await;
        format!(
            "the gateway made {} late as {}; {news}",
            label(&refund),
            made.refund_id
        )
    }

    /// A refund cobro holds `APROBADO` (of the order, or the next order's)
    /// that the gateway approved fails there after it succeeded, and the
    /// gateway sends `charge.failed` with the refund's id. Only a refund
    /// of the order's own charge (not of a duplicate), and only when its
    /// failure leaves at most one charge of the order standing at the
    /// gateway: the gateway's failure must not charge the order twice.
    pub(super) async fn refund_fails(&mut self, order: u8) -> String {
        let ledger = self.ledger().await;
        let standing_without = |r: &RefundEntry| {
            ledger
                .entries_for_order(&r.order_id)
                .filter(|e| e.is_approved())
                .filter(|e| {
                    let refunded: i64 = ledger
                        .refunds_for_charge(&e.charge_id)
                        .filter(|x| x.is_approved() && x.refund_id != r.refund_id)
                        .map(|x| x.amount_minor)
                        .sum();
                    refunded < e.amount_minor
                })
                .count()
        };
        let approved_there = |key: &str| {
            ledger
                .refunds
                .iter()
                .find(|r| r.idempotency_key == key && r.is_approved())
                .filter(|r| standing_without(r) <= 1)
                .cloned()
        };
        let refunds = self
            .candidates(order, |a| {
                a.is_refund()
                    && a.state == State::Aprobado
                    && a.refund_of_gateway.is_none()
                    && approved_there(&a.idempotency_key.to_string()).is_some()
            })
            .await;
        let Some((refund, there)) = refunds.into_iter().find_map(|a| {
            let there = approved_there(&a.idempotency_key.to_string())?;
            Some((a, there))
        }) else {
            return "no approved refund whose failure leaves the order charged once".into();
        };
        let failed: RefundEntry = self
            .control(
                "/control/refund-failed",
                &json!({ "refund_id": there.refund_id, "reason": "expired_or_canceled_card" }),
            )
            .await;
        let news = self
            .deliver(
                &format!("re:{}", failed.seq),
                false,
                refund_news(&failed),
                false,
            )
            .await;
        format!(
            "the gateway failed {} ({}) after it succeeded; {news}",
            label(&refund),
            failed.refund_id
        )
    }
}

/// What a webhook says of a refund in the gateway's ledger: a refund's
/// news is charge news under the refund's own key, with the refund's id
/// (what cobro's event format acts on).
fn refund_news(r: &RefundEntry) -> Value {
    json!({
        "charge_id": r.refund_id, "idempotency_key": r.idempotency_key,
        "order_id": r.order_id, "amount_minor": r.amount_minor,
        "currency": r.currency, "status": r.status, "decline_code": r.decline_code,
    })
}

/// What a webhook says of a charge in the gateway's ledger.
fn charge_news(e: &LedgerEntry) -> Value {
    json!({
        "charge_id": e.charge_id, "idempotency_key": e.idempotency_key,
        "order_id": e.order_id, "amount_minor": e.amount_minor,
        "currency": e.currency, "status": e.status, "decline_code": e.decline_code,
    })
}
