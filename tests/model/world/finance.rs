//! Finance's side of a case, honest: it decides an attempt in doubt by what
//! the gateway's ledger shows, asks for a declined charge's retry, and
//! closes a case only after refunding at the gateway what the case says
//! was charged and we do not hold as charged (it waits while such a charge
//! is an attempt of ours not settled yet); it runs the daily
//! reconciliation. Once in a while it is hasty:
//! it declines a charge or refund in doubt without looking, which cobro
//! must not record on its word alone when it was sent.

use cobro::state::State;
use serde_json::json;

use super::super::common;
use super::super::steps::ORDERS;
use super::{Answered, World, label, left_of};

impl World {
    /// Finance decides the order's attempt in doubt by the gateway's ledger
    /// (or, `hasty`, declines it without looking).
    pub(super) async fn resolve(&mut self, order: u8, check_now: bool, hasty: bool) -> String {
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
            _ if hasty => {
                json!({"action": "decline", "version": version,
                       "code": "finance_hasty", "note": "model: declined without looking"})
            }
            (false, Some(id)) => json!({"action": "approve", "version": version,
                                        "charge_id": id, "note": "model: seen in the dashboard"}),
            // A charge not on the dashboard is declined: the gateway may
            // still be executing it, and cobro must not record that on
            // finance's word alone. A refund is the customer's money: finance does not turn one
            // down that the gateway did not decline; it has it looked up
            // again (and re-sent when not found).
            (false, None) if declined || !a.is_refund() => {
                json!({"action": "decline", "version": version,
                       "code": "not_at_gateway", "note": "model: not in the dashboard"})
            }
            _ => json!({"action": "check_now", "version": version, "note": "model: look again"}),
        };
        // 202: a decline asked for (a payment object, or a sent charge or
        // refund, that may still succeed).
        let path = format!("/finance/api/attempts/{}/resolve", a.id);
        let expected = [200, 202, 404, 409, 422];
        let Answered {
            status,
            body: reply,
            ..
        } = self.post("ana", &path, None, &body, &expected).await;
        let what = body["action"].as_str().unwrap_or("");
        match status {
            200 => format!("{what} {} {}: now {}", label(&a), a.state, reply["state"]),
            _ => format!("{what} {}: {status} {}", label(&a), reply["error"]),
        }
    }

    pub(super) async fn finance_retry(&mut self, order: u8, pick: u8) -> String {
        let declined = self
            .candidates(order, |a| !a.is_refund() && a.state == State::Rechazado)
            .await;
        if declined.is_empty() {
            return "no declined charge".into();
        }
        let a = &declined[usize::from(pick) % declined.len()];
        // 202: the declined attempt's retry is due now; a worker step looks
        // it up and makes the new attempt (if the rule still allows it).
        let path = format!("/finance/api/attempts/{}/retry", a.id);
        let expected = [202, 404, 409, 422];
        let Answered {
            status,
            body: reply,
            ..
        } = self.post("luis", &path, None, &json!({}), &expected).await;
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
    pub(super) async fn close_case(&mut self, pick: u8) -> String {
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
        let named: Vec<_> = c
            .gateway_ref
            .as_deref()
            .unwrap_or("")
            .split(',')
            .filter_map(|id| {
                ledger
                    .entries
                    .iter()
                    .find(|e| e.charge_id == id.trim() && e.is_approved())
            })
            .collect();
        // A charge whose attempt of ours is not settled yet is not judged
        // yet: cobro may still record it (a case about news under another
        // attempt's key can name one). Finance waits.
        if let Some(live) = ours.iter().find(|a| {
            !a.state.is_terminal()
                && named
                    .iter()
                    .any(|e| e.idempotency_key == a.idempotency_key.to_string())
        }) {
            return format!(
                "case {} ({}): waits, it names a charge of {} still {}",
                c.id,
                c.kind,
                label(live),
                live.state
            );
        }
        let mut refunded = Vec::new();
        for e in named {
            let held = ours.iter().any(|a| {
                a.idempotency_key.to_string() == e.idempotency_key && a.state == State::Aprobado
            });
            let left = left_of(&ledger, e);
            if held || left <= 0 {
                continue;
            }
            let _: serde_json::Value = self
                .control(
                    "/control/inject",
                    &json!({
                        "kind": "refund", "charge_id": e.charge_id, "order_id": e.order_id,
                        "amount_minor": left, "currency": e.currency,
                    }),
                )
                .await;
            refunded.push(format!("{} ({left})", e.charge_id));
        }
        let note = match refunded.is_empty() {
            true => "model: checked in the gateway dashboard, nothing to do".to_owned(),
            false => format!(
                "model: refunded {} in the gateway dashboard",
                refunded.join(", ")
            ),
        };
        let path = format!("/finance/api/cases/{}/resolve", c.id);
        let expected = [200, 404, 409, 422];
        let Answered {
            status,
            body: reply,
            ..
        } = self
            .post("ana", &path, None, &json!({ "note": note }), &expected)
            .await;
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

    /// The daily reconciliation over the week up to now (keys aged by a
    /// day passing included), against the gateway's listings.
    pub(super) async fn reconcile(&mut self) -> String {
        let now = chrono::Utc::now();
        let window = cobro::domain::Window::new(
            now - chrono::TimeDelta::days(7),
            now + chrono::TimeDelta::minutes(1),
        )
        .expect("a week is a window");
        let gateway = common::sim_gateway(&self.sim_url);
        match cobro::recon::reconcile(&self.db.store, &gateway, &window).await {
            Ok(r) => format!(
                "reconciled: {} cases opened ({} already open), {} settled, {} refunds marked, {} in flight",
                r.opened,
                r.already_open,
                r.resolved.len(),
                r.refunds_marked.len(),
                r.in_flight.len()
            ),
            // The gateway did not answer a listing or a lookup: nothing
            // written, an outcome. The database refusing a write: cobro's
            // own failure, flagged as a server error is.
            Err(e @ cobro::recon::ReconError::Store(_)) => {
                format!("SERVER ERROR: reconciliation: {e}")
            }
            Err(e) => format!("reconciliation did not run: {e}"),
        }
    }
}
