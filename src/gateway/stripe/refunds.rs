//! Refunds: `POST /v1/refunds` for the PaymentIntent with the refund's own
//! key, and a refund looked up among the PaymentIntent's refunds by the key
//! in its metadata.

use std::time::Instant;

use super::calls::{
    Refusal, auth_refused, detail_of, not_from_stripe, not_now, parse, redirected, refusal,
    unanswered_send,
};
use super::classify::{self, META_KEY, META_ORDER, Object};
use super::list::Walk;
use super::{StripeGateway, evidence, lookup_evidence};
use crate::gateway::{ChargeOutcome, Deferral, Evidence, LookupCall, LookupOutcome, RefundCall};

impl StripeGateway {
    /// `POST /v1/refunds` for the PaymentIntent, with the refund's key.
    pub(super) async fn create_refund(&self, call: &RefundCall) -> ChargeOutcome {
        let started = Instant::now();
        let ev = |kind: &str, status: Option<u16>, detail: Option<String>| {
            evidence("refund", status, kind, detail, started)
        };
        let key = call.key.to_string();
        let form = vec![
            ("payment_intent".to_owned(), call.charge_id.clone()),
            ("amount".to_owned(), call.amount.minor().to_string()),
            (format!("metadata[{META_KEY}]"), key.clone()),
            (
                format!("metadata[{META_ORDER}]"),
                call.order_id.as_str().to_owned(),
            ),
        ];
        let a = match self.post("/v1/refunds", &key, &form).await {
            Ok(a) => a,
            Err(t) => return unanswered_send(t, ev("", None, None)),
        };
        if a.code == 200 {
            return match parse(&a) {
                Some(r) => refund_outcome(r, ev("ok", Some(200), None)),
                None => ChargeOutcome::Unknown {
                    evidence: ev("bad_body", Some(200), None),
                },
            };
        }
        match refusal("refund", &a) {
            Refusal::Redirect(r) => redirected(r, ev("redirected", Some(a.code), None), &a),
            Refusal::Auth => auth_refused("refund", &a, started),
            Refusal::NotNow => not_now("refund", &a, started),
            Refusal::Idempotency => ChargeOutcome::Refused {
                evidence: ev("idempotency_error", Some(a.code), detail_of(&a)),
            },
            Refusal::Card(e) | Refusal::Invalid(e) => ChargeOutcome::Declined {
                code: e.code.clone().unwrap_or_else(|| format!("http_{}", a.code)),
                charge_id: None,
                evidence: ev("http_4xx", Some(a.code), Some(classify::codes(&e))),
            },
            // Not Stripe's word: the refund may exist; looked up by its key.
            Refusal::NotFromStripe => ChargeOutcome::Unknown {
                evidence: not_from_stripe("refund", &a, started),
            },
            Refusal::Conflict | Refusal::Server => ChargeOutcome::Unknown {
                evidence: ev("http_5xx_or_409", Some(a.code), detail_of(&a)),
            },
        }
    }

    /// A refund by its key: among the PaymentIntent's refunds, the one
    /// whose metadata carries the key.
    pub(super) async fn look_up_refund(&self, call: &LookupCall) -> LookupOutcome {
        let started = Instant::now();
        let ev = |kind: &str, result: &str, detail: Option<String>| {
            lookup_evidence("refund_lookup", None, kind, result, detail, started)
        };
        let Some(pi) = &call.charge_id else {
            return LookupOutcome::Failed {
                evidence: ev(
                    "no_charge_id",
                    "failed",
                    Some("the refunded PaymentIntent is not known".into()),
                ),
            };
        };
        let key = call.key.to_string();
        match self.refunds_of(pi, &key).await {
            Ok(refunds) => match refunds.into_iter().find(|r| r.key() == Some(key.as_str())) {
                Some(r) => match refund_outcome(r, ev("ok", "", None)) {
                    ChargeOutcome::Approved {
                        charge_id,
                        evidence,
                    } => LookupOutcome::Approved {
                        charge_id,
                        evidence: Evidence {
                            lookup_result: Some("approved".into()),
                            ..evidence
                        },
                    },
                    ChargeOutcome::Declined {
                        code,
                        charge_id,
                        evidence,
                    } => LookupOutcome::Declined {
                        code,
                        charge_id,
                        evidence: Evidence {
                            lookup_result: Some("declined".into()),
                            ..evidence
                        },
                    },
                    other => LookupOutcome::Failed {
                        evidence: Evidence {
                            lookup_result: Some("failed".into()),
                            ..other.evidence().clone()
                        },
                    },
                },
                None => LookupOutcome::NotFound {
                    evidence: ev("not_found", "not_found", None),
                },
            },
            // A page refused for now (429, 503 with `Retry-After`): not a
            // check; looked up again later.
            Err(Walk::NotNow {
                status,
                retry_after,
            }) => LookupOutcome::Deferred {
                why: Deferral::NotExecuted,
                retry_after,
                evidence: Evidence {
                    http_status: Some(status),
                    ..ev("throttled", "not_executed", None)
                },
            },
            Err(Walk::Capped(n)) => LookupOutcome::Failed {
                evidence: ev(
                    "listing_capped",
                    "failed",
                    Some(format!("more than {n} pages")),
                ),
            },
            Err(Walk::Failed(e)) => LookupOutcome::Failed {
                evidence: ev("listing_failed", "failed", Some(e.to_string())),
            },
        }
    }
}

/// A refund object: only `succeeded` is done; `failed` or `canceled` is a
/// refusal. `pending` and `requires_action` (accepted, not executed yet:
/// it may still fail) and anything unknown stay in doubt, looked up on the
/// schedule (`not_settled` is not a gateway failure for the breaker).
fn refund_outcome(r: Object, ev: Evidence) -> ChargeOutcome {
    match r.status.as_deref() {
        Some("succeeded") => ChargeOutcome::Approved {
            evidence: Evidence {
                detail: r.status.clone(),
                ..ev
            },
            charge_id: r.id,
        },
        Some("failed" | "canceled") => ChargeOutcome::Declined {
            code: r
                .failure_reason
                .clone()
                .unwrap_or_else(|| "refund_failed".into()),
            charge_id: Some(r.id),
            evidence: ev,
        },
        other => ChargeOutcome::Unknown {
            evidence: Evidence {
                error_kind: "not_settled".into(),
                detail: other.map(str::to_owned),
                ..ev
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refund(status: &str) -> Object {
        serde_json::from_value(serde_json::json!({"id": "re_1", "status": status})).unwrap()
    }

    #[test]
    fn only_a_succeeded_refund_is_done_and_a_pending_one_stays_in_doubt() {
        let ev = Evidence::default();
        assert!(matches!(
            refund_outcome(refund("succeeded"), ev.clone()),
            ChargeOutcome::Approved { charge_id, .. } if charge_id == "re_1"
        ));
        for status in ["pending", "requires_action", "something_new"] {
            match refund_outcome(refund(status), ev.clone()) {
                ChargeOutcome::Unknown { evidence } => {
                    assert_eq!(evidence.error_kind, "not_settled", "{status}")
                }
                other => panic!("{status}: {other:?}"),
            }
        }
        for status in ["failed", "canceled"] {
            assert!(
                matches!(
                    refund_outcome(refund(status), ev.clone()),
                    ChargeOutcome::Declined { .. }
                ),
                "{status}"
            );
        }
    }
}
