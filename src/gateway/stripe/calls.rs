//! The Stripe calls behind the `Gateway` trait: create and confirm a
//! PaymentIntent, read it, cancel one stuck on a customer step, refund, and
//! the breaker's probe. What each answer means is decided in
//! [`super::classify`]; here, which call and how a refusal reads.

use std::time::Instant;

use tracing::error;

use super::classify::{
    self, META_ATTEMPT, META_KEY, META_ORDER, Object, Settled, StripeError, error_of,
};
use super::{Answer, StripeGateway, evidence, lookup_evidence};
use crate::domain::IdempotencyKey;
use crate::gateway::http::Transport;
use crate::gateway::{
    ChargeCall, ChargeOutcome, Deferral, Evidence, LookupCall, LookupOutcome, Prepared, RefundCall,
};

/// A non-2xx answer, read before the call decides what it means.
enum Refusal {
    /// 401/403: our key is wrong or revoked. Nothing was executed.
    Auth,
    /// 429, or 503 with `Retry-After`: not executed, for now.
    NotNow,
    /// The key is in use with other parameters.
    Idempotency,
    /// 402: the card was declined.
    Card(StripeError),
    /// Another 4xx: the request itself was refused.
    Invalid(Option<StripeError>),
    /// 409: a request with the same key is still running.
    Conflict,
    /// 5xx without `Retry-After`, or anything else.
    Server,
}

fn refusal(a: &Answer) -> Refusal {
    let err = error_of(a.body.as_ref());
    // A key in use by a request still running (409) clears by itself; the
    // same key with other parameters does not.
    if a.code != 409 && classify::is_idempotency_error(err.as_ref()) {
        return Refusal::Idempotency;
    }
    match (a.code, a.retry_after) {
        (401 | 403, _) => Refusal::Auth,
        (429, _) | (503, Some(_)) => Refusal::NotNow,
        (402, _) => Refusal::Card(err.unwrap_or_default()),
        (409, _) => Refusal::Conflict,
        (400..=499, _) => Refusal::Invalid(err),
        _ => Refusal::Server,
    }
}

fn detail_of(a: &Answer) -> Option<String> {
    error_of(a.body.as_ref()).map(|e| classify::codes(&e))
}

/// A 401/403: loud, since every call will fail the same way until the key
/// is fixed. The breaker counts it as a failure and opens.
fn auth_fault(call: &str, a: &Answer, started: Instant) -> Evidence {
    error!(
        call,
        status = a.code,
        "Stripe refused our API key (401/403): STRIPE_SECRET_KEY is wrong or revoked; nothing was executed, sending stops while the breaker is open"
    );
    crate::metrics::gateway_auth_failed();
    evidence(call, Some(a.code), "auth_failed", detail_of(a), started)
}

fn not_now(call: &str, a: &Answer, started: Instant) -> ChargeOutcome {
    let kind = if a.code == 429 {
        "throttled"
    } else {
        "unavailable"
    };
    ChargeOutcome::Deferred {
        why: Deferral::NotExecuted,
        retry_after: a.retry_after,
        evidence: evidence(call, Some(a.code), kind, detail_of(a), started),
    }
}

fn parse(a: &Answer) -> Option<Object> {
    a.body
        .clone()
        .and_then(|b| serde_json::from_value::<Object>(b).ok())
}

impl StripeGateway {
    /// Step 1: the PaymentIntent, unconfirmed, with the attempt's key.
    pub(super) async fn create_intent(&self, call: &ChargeCall) -> Prepared {
        let started = Instant::now();
        let ev = |kind: &str, status: Option<u16>, detail: Option<String>| {
            evidence("create", status, kind, detail, started)
        };
        let Some(pm) = &call.payment_method else {
            return Prepared::Failed(ChargeOutcome::Declined {
                code: "payment_method_required".into(),
                charge_id: None,
                evidence: ev(
                    "no_payment_method",
                    None,
                    Some("Stripe needs a payment-method token; nothing was sent".into()),
                ),
            });
        };
        let key = call.key.to_string();
        let mut form = vec![
            ("amount".into(), call.amount.minor().to_string()),
            ("currency".into(), call.currency.code().to_ascii_lowercase()),
            ("payment_method".into(), pm.token().to_owned()),
            ("payment_method_types[0]".into(), "card".into()),
            ("confirm".into(), "false".into()),
            (format!("metadata[{META_KEY}]"), key.clone()),
            (
                format!("metadata[{META_ORDER}]"),
                call.order_id.as_str().to_owned(),
            ),
        ];
        if let Some(id) = call.attempt_id {
            form.push((format!("metadata[{META_ATTEMPT}]"), id.to_string()));
        }
        let a = match self.post("/v1/payment_intents", &key, &form).await {
            Ok(a) => a,
            Err(Transport::NotSent(k)) => {
                return Prepared::Failed(ChargeOutcome::Deferred {
                    why: Deferral::NotSent,
                    retry_after: None,
                    evidence: ev(k, None, None),
                });
            }
            Err(Transport::Unknown(k)) => {
                return Prepared::Failed(unanswered_create(ev(k, None, None)));
            }
        };
        if a.code == 200 {
            return match parse(&a) {
                Some(pi) if pi.key().is_some_and(|k| k != key) => {
                    Prepared::Failed(ChargeOutcome::Refused {
                        evidence: ev(
                            "foreign_object",
                            Some(200),
                            Some(format!("create returned {} carrying another key", pi.id)),
                        ),
                    })
                }
                Some(pi) if pi.id.starts_with("pi_") => Prepared::Created {
                    evidence: ev("ok", Some(200), Some(format!("payment_intent={}", pi.id))),
                    gateway_ref: pi.id,
                },
                _ => Prepared::Failed(unanswered_create(ev("bad_body", Some(200), None))),
            };
        }
        Prepared::Failed(match refusal(&a) {
            Refusal::Auth => ChargeOutcome::Deferred {
                why: Deferral::NotExecuted,
                retry_after: None,
                evidence: auth_fault("create", &a, started),
            },
            Refusal::NotNow => not_now("create", &a, started),
            Refusal::Idempotency => ChargeOutcome::Refused {
                evidence: ev("idempotency_error", Some(a.code), detail_of(&a)),
            },
            Refusal::Card(e) => ChargeOutcome::Declined {
                code: classify::decline_code(&e),
                charge_id: None,
                evidence: ev("declined", Some(a.code), Some(classify::codes(&e))),
            },
            // Refused as a request: the PaymentIntent does not exist.
            Refusal::Invalid(e) => ChargeOutcome::Declined {
                code: e
                    .as_ref()
                    .and_then(|e| e.code.clone())
                    .unwrap_or_else(|| format!("http_{}", a.code)),
                charge_id: None,
                evidence: ev("http_4xx", Some(a.code), e.as_ref().map(classify::codes)),
            },
            Refusal::Conflict | Refusal::Server => {
                unanswered_create(ev("http_5xx_or_409", Some(a.code), detail_of(&a)))
            }
        })
    }

    /// Step 2: confirm the recorded PaymentIntent, and only it.
    pub(super) async fn confirm(&self, call: &ChargeCall) -> ChargeOutcome {
        let started = Instant::now();
        let ev = |kind: &str, status: Option<u16>, detail: Option<String>| {
            evidence("charge", status, kind, detail, started)
        };
        let Some(pi) = call.gateway_ref.as_deref() else {
            return ChargeOutcome::Deferred {
                why: Deferral::NotSent,
                retry_after: None,
                evidence: ev(
                    "no_payment_intent",
                    None,
                    Some("nothing recorded to confirm".into()),
                ),
            };
        };
        let mut form = Vec::new();
        if call.merchant_initiated && self.off_session_retries {
            form.push(("off_session".to_owned(), "true".to_owned()));
        }
        let path = format!("/v1/payment_intents/{pi}/confirm");
        let a = match self
            .post(&path, &format!("{}-confirm", call.key), &form)
            .await
        {
            Ok(a) => a,
            Err(Transport::NotSent(k)) => {
                return ChargeOutcome::Deferred {
                    why: Deferral::NotSent,
                    retry_after: None,
                    evidence: ev(k, None, None),
                };
            }
            Err(Transport::Unknown(k)) => {
                return ChargeOutcome::Unknown {
                    evidence: ev(k, None, None),
                };
            }
        };
        if a.code == 200 {
            let Some(obj) = parse(&a) else {
                return ChargeOutcome::Unknown {
                    evidence: ev("bad_body", Some(200), None),
                };
            };
            return self
                .settled_charge(pi, call.key, &obj, ev("ok", Some(200), None))
                .await;
        }
        match refusal(&a) {
            Refusal::Auth => ChargeOutcome::Deferred {
                why: Deferral::NotExecuted,
                retry_after: None,
                evidence: auth_fault("charge", &a, started),
            },
            Refusal::NotNow => not_now("charge", &a, started),
            Refusal::Idempotency => ChargeOutcome::Refused {
                evidence: ev("idempotency_error", Some(a.code), detail_of(&a)),
            },
            Refusal::Card(e) => ChargeOutcome::Declined {
                code: classify::decline_code(&e),
                charge_id: Some(pi.to_owned()),
                evidence: ev("declined", Some(a.code), Some(classify::codes(&e))),
            },
            // Already confirmed (`payment_intent_unexpected_state`), or a
            // server's bare 400: never "create another"; read it now.
            Refusal::Invalid(_) | Refusal::Conflict => {
                let refused = detail_of(&a);
                match self.intent(pi, call.key).await {
                    LookupOutcome::Approved {
                        charge_id,
                        evidence,
                    } => ChargeOutcome::Approved {
                        charge_id,
                        evidence,
                    },
                    LookupOutcome::Declined {
                        code,
                        charge_id,
                        evidence,
                    } => ChargeOutcome::Declined {
                        code,
                        charge_id,
                        evidence,
                    },
                    // Still unconfirmed after a 400: the confirm itself is
                    // refused, and sending it again would be refused again.
                    LookupOutcome::NotFound { .. } if a.code != 409 => ChargeOutcome::Refused {
                        evidence: ev("confirm_refused", Some(a.code), refused),
                    },
                    other => ChargeOutcome::Unknown {
                        evidence: Evidence {
                            detail: refused,
                            ..other.evidence().clone()
                        },
                    },
                }
            }
            Refusal::Server => ChargeOutcome::Unknown {
                evidence: ev("http_5xx", Some(a.code), detail_of(&a)),
            },
        }
    }

    /// What a PaymentIntent returned by a confirm says.
    async fn settled_charge(
        &self,
        pi: &str,
        key: IdempotencyKey,
        obj: &Object,
        ev: Evidence,
    ) -> ChargeOutcome {
        match classify::settle(obj) {
            Settled::Succeeded => ChargeOutcome::Approved {
                charge_id: obj.id.clone(),
                evidence: ev,
            },
            Settled::Failed { code, detail } => ChargeOutcome::Declined {
                code,
                charge_id: Some(obj.id.clone()),
                evidence: Evidence {
                    detail: Some(detail),
                    error_kind: "declined".into(),
                    ..ev
                },
            },
            Settled::NeedsAction => match self.cancel_needing_action(pi, key).await {
                LookupOutcome::Declined {
                    code,
                    charge_id,
                    evidence,
                } => ChargeOutcome::Declined {
                    code,
                    charge_id,
                    evidence,
                },
                LookupOutcome::Approved {
                    charge_id,
                    evidence,
                } => ChargeOutcome::Approved {
                    charge_id,
                    evidence,
                },
                other => ChargeOutcome::Unknown {
                    evidence: other.evidence().clone(),
                },
            },
            Settled::NotConfirmed | Settled::Pending(_) => ChargeOutcome::Unknown {
                evidence: Evidence {
                    error_kind: "not_settled".into(),
                    detail: obj.status.clone(),
                    ..ev
                },
            },
        }
    }

    /// `GET /v1/payment_intents/{id}`: the strongly consistent answer.
    pub(super) async fn intent(&self, pi: &str, key: IdempotencyKey) -> LookupOutcome {
        let started = Instant::now();
        let ev = |kind: &str, status: Option<u16>, result: &str, detail: Option<String>| {
            lookup_evidence("lookup", status, kind, result, detail, started)
        };
        let a = match self.get(&format!("/v1/payment_intents/{pi}"), &[]).await {
            Ok(a) => a,
            Err(Transport::NotSent(k)) => {
                return LookupOutcome::Deferred {
                    why: Deferral::NotSent,
                    retry_after: None,
                    evidence: ev(k, None, "not_sent", None),
                };
            }
            Err(Transport::Unknown(k)) => {
                return LookupOutcome::Failed {
                    evidence: ev(k, None, "failed", None),
                };
            }
        };
        if a.code != 200 {
            return match refusal(&a) {
                Refusal::Auth => LookupOutcome::Deferred {
                    why: Deferral::NotExecuted,
                    retry_after: None,
                    evidence: auth_fault("lookup", &a, started),
                },
                Refusal::NotNow => LookupOutcome::Deferred {
                    why: Deferral::NotExecuted,
                    retry_after: a.retry_after,
                    evidence: ev("throttled", Some(a.code), "not_executed", detail_of(&a)),
                },
                _ => LookupOutcome::Failed {
                    evidence: ev(
                        &format!("http_{}", a.code),
                        Some(a.code),
                        "failed",
                        detail_of(&a),
                    ),
                },
            };
        }
        let Some(obj) = parse(&a) else {
            return LookupOutcome::Failed {
                evidence: ev("bad_body", Some(200), "failed", None),
            };
        };
        if obj.key().is_some_and(|k| k != key.to_string()) {
            return LookupOutcome::Failed {
                evidence: ev(
                    "foreign_object",
                    Some(200),
                    "failed",
                    Some(format!("{} carries another key", obj.id)),
                ),
            };
        }
        let status = obj.status.clone();
        match classify::settle(&obj) {
            Settled::Succeeded => LookupOutcome::Approved {
                charge_id: obj.id,
                evidence: ev("ok", Some(200), "approved", None),
            },
            Settled::Failed { code, detail } => LookupOutcome::Declined {
                code,
                charge_id: Some(obj.id),
                evidence: ev("ok", Some(200), "declined", Some(detail)),
            },
            Settled::NotConfirmed => LookupOutcome::NotFound {
                evidence: ev("not_confirmed", Some(200), "not_found", status),
            },
            Settled::NeedsAction => self.cancel_needing_action(pi, key).await,
            Settled::Pending(s) => LookupOutcome::Failed {
                evidence: ev("not_settled", Some(200), "failed", Some(s)),
            },
        }
    }

    /// A PaymentIntent waiting for the customer (3-D Secure on a charge
    /// made without them) is canceled, so that it can never succeed behind
    /// a decline we record; then it is a decline the app and the customer
    /// can act on (`authentication_required`, not retried on its own).
    async fn cancel_needing_action(&self, pi: &str, key: IdempotencyKey) -> LookupOutcome {
        let started = Instant::now();
        let path = format!("/v1/payment_intents/{pi}/cancel");
        let answer = self.post(&path, &format!("{key}-cancel"), &[]).await;
        let ev = |kind: &str, status: Option<u16>, result: &str, detail: Option<String>| {
            lookup_evidence("cancel", status, kind, result, detail, started)
        };
        match answer {
            Ok(a) if a.code == 200 && parse(&a).and_then(|o| o.status).as_deref() == Some("canceled") => {
                LookupOutcome::Declined {
                    code: "authentication_required".into(),
                    charge_id: Some(pi.to_owned()),
                    evidence: ev(
                        "requires_action",
                        Some(200),
                        "declined",
                        Some("the customer must authenticate (3-D Secure); the PaymentIntent was canceled so it cannot succeed later".into()),
                    ),
                }
            }
            Ok(a) => LookupOutcome::Failed {
                evidence: ev("cancel_refused", Some(a.code), "failed", detail_of(&a)),
            },
            Err(Transport::NotSent(k) | Transport::Unknown(k)) => LookupOutcome::Failed {
                evidence: ev(k, None, "failed", None),
            },
        }
    }

    /// A lookup: by the recorded PaymentIntent, or, with none recorded (a
    /// worker vanished between the create and its record), by the key in
    /// the metadata of the PaymentIntents created since the attempt began.
    pub(super) async fn look_up(&self, call: &LookupCall) -> LookupOutcome {
        if let Some(pi) = &call.gateway_ref {
            return self.intent(pi, call.key).await;
        }
        let started = Instant::now();
        match self.find_intent(call).await {
            Ok(Some(pi)) => self.intent(&pi, call.key).await,
            Ok(None) => LookupOutcome::NotFound {
                evidence: lookup_evidence(
                    "lookup",
                    Some(200),
                    "not_found",
                    "not_found",
                    Some("no PaymentIntent carries this key".into()),
                    started,
                ),
            },
            Err(e) => LookupOutcome::Failed {
                evidence: lookup_evidence(
                    "lookup",
                    None,
                    "listing_failed",
                    "failed",
                    Some(e.to_string()),
                    started,
                ),
            },
        }
    }

    /// The breaker's probe: a PaymentIntent id nobody has. Stripe's own
    /// 404 (an error object) is an answer.
    pub(super) async fn probe_api(&self) -> LookupOutcome {
        let started = Instant::now();
        let id = format!("pi_cobroprobe{}", uuid::Uuid::new_v4().simple());
        let ev = |kind: &str, status: Option<u16>, result: &str| {
            lookup_evidence("probe", status, kind, result, None, started)
        };
        match self.get(&format!("/v1/payment_intents/{id}"), &[]).await {
            Ok(a) if a.code == 404 && error_of(a.body.as_ref()).is_some() => {
                LookupOutcome::NotFound {
                    evidence: ev("not_found", Some(404), "not_found"),
                }
            }
            Ok(a) => match refusal(&a) {
                Refusal::Auth => LookupOutcome::Deferred {
                    why: Deferral::NotExecuted,
                    retry_after: None,
                    evidence: auth_fault("probe", &a, started),
                },
                Refusal::NotNow => LookupOutcome::Deferred {
                    why: Deferral::NotExecuted,
                    retry_after: a.retry_after,
                    evidence: ev("throttled", Some(a.code), "not_executed"),
                },
                _ if a.code >= 500 => LookupOutcome::Failed {
                    evidence: ev("http_5xx", Some(a.code), "failed"),
                },
                _ => LookupOutcome::Failed {
                    evidence: ev("http_other", Some(a.code), "failed"),
                },
            },
            Err(Transport::NotSent(k)) => LookupOutcome::Deferred {
                why: Deferral::NotSent,
                retry_after: None,
                evidence: ev(k, None, "not_sent"),
            },
            Err(Transport::Unknown(k)) => LookupOutcome::Failed {
                evidence: ev(k, None, "failed"),
            },
        }
    }

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
            Err(Transport::NotSent(k)) => {
                return ChargeOutcome::Deferred {
                    why: Deferral::NotSent,
                    retry_after: None,
                    evidence: ev(k, None, None),
                };
            }
            Err(Transport::Unknown(k)) => {
                return ChargeOutcome::Unknown {
                    evidence: ev(k, None, None),
                };
            }
        };
        if a.code == 200 {
            return match parse(&a) {
                Some(r) => refund_outcome(r, ev("ok", Some(200), None)),
                None => ChargeOutcome::Unknown {
                    evidence: ev("bad_body", Some(200), None),
                },
            };
        }
        match refusal(&a) {
            Refusal::Auth => ChargeOutcome::Deferred {
                why: Deferral::NotExecuted,
                retry_after: None,
                evidence: auth_fault("refund", &a, started),
            },
            Refusal::NotNow => not_now("refund", &a, started),
            Refusal::Idempotency => ChargeOutcome::Refused {
                evidence: ev("idempotency_error", Some(a.code), detail_of(&a)),
            },
            Refusal::Card(e) | Refusal::Invalid(Some(e)) => ChargeOutcome::Declined {
                code: e.code.clone().unwrap_or_else(|| format!("http_{}", a.code)),
                charge_id: None,
                evidence: ev("http_4xx", Some(a.code), Some(classify::codes(&e))),
            },
            Refusal::Invalid(None) => ChargeOutcome::Declined {
                code: format!("http_{}", a.code),
                charge_id: None,
                evidence: ev("http_4xx", Some(a.code), None),
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
        match self.refunds_of(pi).await {
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
            Err(e) => LookupOutcome::Failed {
                evidence: ev("listing_failed", "failed", Some(e.to_string())),
            },
        }
    }
}

/// A create that got no answer, or an answer that is not one: an
/// unconfirmed PaymentIntent moves no money, so it is created again (same
/// key) later, never looked up as a charge.
fn unanswered_create(evidence: Evidence) -> ChargeOutcome {
    ChargeOutcome::Deferred {
        why: Deferral::Unconfirmed,
        retry_after: None,
        evidence: Evidence {
            detail: Some(evidence.detail.unwrap_or_else(|| {
                "no answer to the PaymentIntent's create; unconfirmed, it moved no money".into()
            })),
            ..evidence
        },
    }
}

/// A refund object: succeeded or pending (accepted, executing) is done;
/// failed or canceled is a refusal.
fn refund_outcome(r: Object, ev: Evidence) -> ChargeOutcome {
    match r.status.as_deref() {
        Some("succeeded" | "pending") => ChargeOutcome::Approved {
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
