//! The charge's two calls: create a PaymentIntent unconfirmed, confirm the
//! recorded one; and how any refusal from Stripe reads (shared with
//! [`super::lookup`] and [`super::refunds`]). What a PaymentIntent's status
//! means is decided in [`super::classify`].

use std::time::Instant;

use tracing::{error, warn};

use super::classify::{
    self, META_ATTEMPT, META_KEY, META_ORDER, Object, Settled, StripeError, error_of,
};
use super::{Answer, StripeGateway, evidence};
use crate::domain::IdempotencyKey;
use crate::gateway::http::{Redirect, Transport, redirect};
use crate::gateway::{ChargeCall, ChargeOutcome, Deferral, Evidence, LookupOutcome, Prepared};

/// A non-2xx answer, read before the call decides what it means.
pub(super) enum Refusal {
    /// A 3xx: never followed; not executed when the resource moved.
    Redirect(Redirect),
    /// 401/403: our key is wrong or revoked. Nothing was executed.
    Auth,
    /// 429, or 503 with `Retry-After`: not executed, for now.
    NotNow,
    /// The key is in use with other parameters.
    Idempotency,
    /// 402 with Stripe's error object: the card was declined.
    Card(StripeError),
    /// Another 4xx with Stripe's error object: the request itself was
    /// refused.
    Invalid(StripeError),
    /// A 4xx (402 included) without Stripe's error object: a proxy, a load
    /// balancer or a firewall may have answered it (a 408, 413 or 425, a
    /// bare 404), not Stripe, so what Stripe did is not known.
    NotFromStripe,
    /// 409: a request with the same key is still running.
    Conflict,
    /// 5xx without `Retry-After`, or anything else.
    Server,
}

/// `call`: for the warning a redirect logs.
pub(super) fn refusal(call: &str, a: &Answer) -> Refusal {
    if let Some(r) = redirect(call, a.code, a.location.as_deref()) {
        return Refusal::Redirect(r);
    }
    let err = error_of(a.body.as_ref());
    // A key in use by a request still running (409) clears by itself; the
    // same key with other parameters does not.
    if a.code != 409 && classify::is_idempotency_error(err.as_ref()) {
        return Refusal::Idempotency;
    }
    match (a.code, a.retry_after, err) {
        (401 | 403, _, _) => Refusal::Auth,
        (429, _, _) | (503, Some(_), _) => Refusal::NotNow,
        (409, _, _) => Refusal::Conflict,
        (402, _, Some(e)) => Refusal::Card(e),
        (400..=499, _, Some(e)) => Refusal::Invalid(e),
        (400..=499, _, None) => Refusal::NotFromStripe,
        _ => Refusal::Server,
    }
}

/// The evidence of a [`Refusal::NotFromStripe`].
pub(super) fn not_from_stripe(call: &str, a: &Answer, started: Instant) -> Evidence {
    evidence(
        call,
        Some(a.code),
        "http_4xx_unexpected",
        Some(format!(
            "HTTP {} without Stripe's error object: a proxy or load balancer may have answered; what Stripe did is not known",
            a.code
        )),
        started,
    )
}

pub(super) fn detail_of(a: &Answer) -> Option<String> {
    error_of(a.body.as_ref()).map(|e| classify::codes(&e))
}

/// A 401/403: loud, since every call will fail the same way until the key
/// is fixed. The breaker counts it as a failure and opens; the caller's
/// metrics count it by its `auth_failed` kind.
pub(super) fn auth_fault(call: &str, a: &Answer, started: Instant) -> Evidence {
    error!(
        call,
        status = a.code,
        "Stripe refused our API key (401/403): STRIPE_SECRET_KEY is wrong or revoked; nothing was executed, sending stops while the breaker is open"
    );
    evidence(call, Some(a.code), "auth_failed", detail_of(a), started)
}

/// A charge call Stripe refused our API key for: nothing was executed.
pub(super) fn auth_refused(call: &str, a: &Answer, started: Instant) -> ChargeOutcome {
    ChargeOutcome::Deferred {
        why: Deferral::NotExecuted,
        retry_after: None,
        evidence: auth_fault(call, a, started),
    }
}

/// A card error: a definite decline, with the brand Stripe named;
/// `charge_id` is the PaymentIntent when there is one.
fn card_declined(e: &StripeError, charge_id: Option<&str>, ev: Evidence) -> ChargeOutcome {
    ChargeOutcome::Declined {
        code: classify::decline_code(e),
        charge_id: charge_id.map(str::to_owned),
        evidence: Evidence {
            card_brand: e.card_brand.clone(),
            detail: Some(classify::codes(e)),
            ..ev
        },
    }
}

pub(super) fn not_now(call: &str, a: &Answer, started: Instant) -> ChargeOutcome {
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

/// The object of a 200, made fit to store; `None` when the body is not
/// one, or its id cannot be stored as it is (logged): a malformed answer.
pub(super) fn parse(a: &Answer) -> Option<Object> {
    let obj = serde_json::from_value::<Object>(a.body.clone()?).ok()?;
    obj.tidied()
        .map_err(|note| {
            warn!(%note, "Stripe answered an id cobro cannot store; read as a malformed answer");
        })
        .ok()
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
        // A payment method saved to a Customer is refused without it.
        if let Some(customer) = &call.customer {
            form.push(("customer".into(), customer.id().to_owned()));
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
            Err(t @ (Transport::Unknown(_) | Transport::TooLarge { .. })) => {
                return Prepared::Failed(unanswered_create(ev(t.kind(), t.status(), t.detail())));
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
        Prepared::Failed(match refusal("create", &a) {
            // An unconfirmed PaymentIntent moves no money: whatever the
            // redirect, the create is tried again later, same key.
            Refusal::Redirect(r) => ChargeOutcome::Deferred {
                why: match r.not_executed {
                    true => Deferral::NotExecuted,
                    false => Deferral::Unconfirmed,
                },
                retry_after: a.retry_after,
                evidence: ev("redirected", Some(a.code), Some(r.detail)),
            },
            Refusal::Auth => auth_refused("create", &a, started),
            Refusal::NotNow => not_now("create", &a, started),
            Refusal::Idempotency => ChargeOutcome::Refused {
                evidence: ev("idempotency_error", Some(a.code), detail_of(&a)),
            },
            Refusal::Card(e) => card_declined(&e, None, ev("declined", Some(a.code), None)),
            // Refused as a request: the PaymentIntent does not exist.
            Refusal::Invalid(e) => ChargeOutcome::Declined {
                code: e.code.clone().unwrap_or_else(|| format!("http_{}", a.code)),
                charge_id: None,
                evidence: ev("http_4xx", Some(a.code), Some(classify::codes(&e))),
            },
            // Stripe may have created it: made again later, same key.
            Refusal::NotFromStripe => unanswered_create(not_from_stripe("create", &a, started)),
            // Stripe keeps a create's first answer for its key, a 500
            // included, and replays it for 24 hours: sent again, the create
            // gets nothing else. Nothing was confirmed, so nothing charged;
            // finance decides (decline it, then retry with a new key).
            Refusal::Server if a.replayed => ChargeOutcome::Refused {
                evidence: ev(
                    "idempotent_replay_of_error",
                    Some(a.code),
                    Some(format!(
                        "Stripe replays this key's first answer (HTTP {}) for 24 hours; the PaymentIntent was never confirmed, nothing was charged: decline it (cobro escalations resolve --as decline), then retry it with a new key (cobro retry){}",
                        a.code,
                        detail_of(&a).map(|d| format!(" ({d})")).unwrap_or_default()
                    )),
                ),
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
        if !classify::path_safe(pi) {
            // Never put in a path; nothing more is sent: finance decides.
            return ChargeOutcome::Refused {
                evidence: ev(
                    "unsafe_payment_intent_id",
                    None,
                    Some(format!(
                        "{} is not a Stripe id",
                        crate::domain::text::stored(pi, crate::domain::text::Kind::Id)
                    )),
                ),
            };
        }
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
            Err(t) => return unanswered_send(t, ev("", None, None)),
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
        match refusal("charge", &a) {
            Refusal::Redirect(r) => redirected(r, ev("redirected", Some(a.code), None), &a),
            Refusal::Auth => auth_refused("charge", &a, started),
            Refusal::NotNow => not_now("charge", &a, started),
            Refusal::Idempotency => ChargeOutcome::Refused {
                evidence: ev("idempotency_error", Some(a.code), detail_of(&a)),
            },
            Refusal::Card(e) => card_declined(&e, Some(pi), ev("declined", Some(a.code), None)),
            // Stripe may have run the confirm, or never seen it: looked up
            // on the schedule; still unconfirmed, confirmed again.
            Refusal::NotFromStripe => ChargeOutcome::Unknown {
                evidence: not_from_stripe("charge", &a, started),
            },
            // Already confirmed (`payment_intent_unexpected_state`), or a
            // server's 400 without a code (localstripe's "Bad request"):
            // never "create another"; read it now.
            Refusal::Invalid(_) | Refusal::Conflict => {
                let refused = detail_of(&a);
                let found = self.intent(pi, call.key, false).await;
                match (found.definite(), &found) {
                    (Some(settled), _) => settled,
                    // Still unconfirmed after a 400: the confirm itself is
                    // refused, and sending it again would be refused again.
                    (None, LookupOutcome::NotFound { .. }) if a.code != 409 => {
                        ChargeOutcome::Refused {
                            evidence: ev("confirm_refused", Some(a.code), refused),
                        }
                    }
                    (None, other) => ChargeOutcome::Unknown {
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
        let ev = Evidence {
            card_brand: obj.card_brand(),
            ..ev
        };
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
            Settled::NeedsAction => {
                let found = self.cancel_needing_action(pi, key, false).await;
                found.definite().unwrap_or_else(|| ChargeOutcome::Unknown {
                    evidence: found.evidence().clone(),
                })
            }
            Settled::NotConfirmed | Settled::Pending(_) => ChargeOutcome::Unknown {
                evidence: Evidence {
                    error_kind: "not_settled".into(),
                    detail: obj.status.clone(),
                    ..ev
                },
            },
        }
    }
}

/// A send (a confirm, a refund) redirected: not executed when the resource
/// moved, unknown otherwise ([`Redirect`]). `ev` is the call's evidence.
pub(super) fn redirected(r: Redirect, ev: Evidence, a: &Answer) -> ChargeOutcome {
    let evidence = Evidence {
        detail: Some(r.detail),
        ..ev
    };
    match r.not_executed {
        true => ChargeOutcome::Deferred {
            why: Deferral::NotExecuted,
            retry_after: a.retry_after,
            evidence,
        },
        false => ChargeOutcome::Unknown { evidence },
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

/// A send (a confirm, a refund) that got no answer it could read: not sent
/// when the connection was never made, unknown otherwise (an answer too
/// large to read came after the request left). `ev` is the call's
/// evidence; its kind, status and detail become the transport's.
pub(super) fn unanswered_send(t: Transport, ev: Evidence) -> ChargeOutcome {
    let evidence = Evidence {
        error_kind: t.kind().into(),
        http_status: t.status(),
        detail: t.detail(),
        ..ev
    };
    match t {
        Transport::NotSent(_) => ChargeOutcome::Deferred {
            why: Deferral::NotSent,
            retry_after: None,
            evidence,
        },
        Transport::Unknown(_) | Transport::TooLarge { .. } => ChargeOutcome::Unknown { evidence },
    }
}
