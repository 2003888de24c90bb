//! Reading a charge back: the PaymentIntent by id (strongly consistent),
//! by the key in its metadata when no id was recorded, the cancel of one
//! stuck on a customer step, and the breaker's probe.

use std::time::Instant;

use super::calls::{Refusal, auth_fault, detail_of, parse, refusal};
use super::classify::{self, Settled, error_of};
use super::find::{Found, transport_failed, unanswered};
use super::{StripeGateway, lookup_evidence};
use crate::domain::IdempotencyKey;
use crate::gateway::http::Transport;
use crate::gateway::{Deferral, Evidence, LookupCall, LookupOutcome};

impl StripeGateway {
    /// `GET /v1/payment_intents/{id}`: the strongly consistent answer.
    pub(super) async fn intent(
        &self,
        pi: &str,
        key: IdempotencyKey,
        make_final: bool,
    ) -> LookupOutcome {
        let started = Instant::now();
        let ev = |kind: &str, status: Option<u16>, result: &str, detail: Option<String>| {
            lookup_evidence("lookup", status, kind, result, detail, started)
        };
        // A recorded id that is not a Stripe id (a row edited by hand) is
        // never put in a path: no answer, never "not found".
        if !classify::path_safe(pi) {
            return LookupOutcome::Failed {
                evidence: ev(
                    "unsafe_id",
                    None,
                    "failed",
                    Some(format!(
                        "{} is not a Stripe id",
                        crate::domain::text::stored(pi, crate::domain::text::Kind::Id)
                    )),
                ),
            };
        }
        let a = match self.get(&format!("/v1/payment_intents/{pi}"), &[]).await {
            Ok(a) => a,
            Err(t) => return transport_failed(t, &ev),
        };
        if a.code != 200 {
            return unanswered("lookup", &a, started);
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
                evidence: Evidence {
                    card_brand: obj.card_brand(),
                    ..ev("ok", Some(200), "declined", Some(detail))
                },
                charge_id: Some(obj.id),
            },
            // Finance asked to decline it: what could still succeed is
            // cancelled first, and only a cancel Stripe confirms declines.
            Settled::NotConfirmed | Settled::Pending(_) if make_final => {
                self.cancel_needing_action(pi, key, true).await
            }
            Settled::NotConfirmed => LookupOutcome::NotFound {
                evidence: ev("not_confirmed", Some(200), "not_found", status),
            },
            Settled::NeedsAction => self.cancel_needing_action(pi, key, make_final).await,
            Settled::Pending(s) => LookupOutcome::Failed {
                evidence: ev("not_settled", Some(200), "failed", Some(s)),
            },
        }
    }

    /// A PaymentIntent waiting for the customer (3-D Secure on a charge
    /// made without them) is canceled, so that it can never succeed behind
    /// a decline we record; then it is a decline the app and the customer
    /// can act on (`authentication_required`, not retried on its own).
    /// `for_finance`: finance asked to decline it (any PaymentIntent that
    /// could still succeed): the decline is `canceled`, once Stripe says so.
    pub(super) async fn cancel_needing_action(
        &self,
        pi: &str,
        key: IdempotencyKey,
        for_finance: bool,
    ) -> LookupOutcome {
        let started = Instant::now();
        let path = format!("/v1/payment_intents/{pi}/cancel");
        let answer = self.post(&path, &format!("{key}-cancel"), &[]).await;
        let ev = |kind: &str, status: Option<u16>, result: &str, detail: Option<String>| {
            lookup_evidence("cancel", status, kind, result, detail, started)
        };
        match answer {
            Ok(a)
                if a.code == 200
                    && parse(&a).and_then(|o| o.status).as_deref() == Some("canceled") =>
            {
                if for_finance {
                    return LookupOutcome::Declined {
                        code: "canceled".into(),
                        charge_id: Some(pi.to_owned()),
                        evidence: ev(
                            "canceled_for_finance",
                            Some(200),
                            "declined",
                            Some("finance asked to decline it; the PaymentIntent was canceled at Stripe so it cannot succeed later".into()),
                        ),
                    };
                }
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
            Err(t) => LookupOutcome::Failed {
                evidence: ev(t.kind(), t.status(), "failed", t.detail()),
            },
        }
    }

    /// A lookup: by the recorded PaymentIntent, or, with none recorded (a
    /// worker vanished between the create and its record), by the key in
    /// its metadata ([`super::find`]: searched, or listed within a cap).
    pub(super) async fn look_up(&self, call: &LookupCall) -> LookupOutcome {
        if let Some(pi) = &call.gateway_ref {
            return self.intent(pi, call.key, call.make_final).await;
        }
        let started = Instant::now();
        match self.find_intent(call).await {
            Found::Intent(pi) => self.intent(&pi, call.key, call.make_final).await,
            Found::Absent(how) => LookupOutcome::NotFound {
                evidence: lookup_evidence(
                    "lookup",
                    Some(200),
                    "not_found",
                    "not_found",
                    Some(how),
                    started,
                ),
            },
            Found::NoAnswer(outcome) => outcome,
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
            Ok(a) => match refusal("probe", &a) {
                Refusal::Redirect(_) => LookupOutcome::Failed {
                    evidence: ev("redirected", Some(a.code), "failed"),
                },
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
            Err(t @ (Transport::Unknown(_) | Transport::TooLarge { .. })) => {
                LookupOutcome::Failed {
                    evidence: Evidence {
                        detail: t.detail(),
                        ..ev(t.kind(), t.status(), "failed")
                    },
                }
            }
        }
    }
}
