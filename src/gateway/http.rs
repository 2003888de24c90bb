//! The HTTP adapter for the simulator's API: `POST /v1/charges` and
//! `POST /v1/refunds` with an `Idempotency-Key` header, `GET /v1/charges/{key}`
//! and `GET /v1/refunds/{key}`. Charges and refunds share one request path and
//! one classification. Listing for reconciliation is in [`list`]; the URL
//! and TLS trust, checked at start-up, in [`client`].
//!
//! Invariant: explicit connect and request timeouts on every call, every
//! body read within a cap ([`body`]: 1 MiB an answer, 8 MiB a page), and
//! every failure classified the same way for charges and refunds: only a
//! parsed 200 (approved), 402/400/422 (declined or refused, never executed)
//! and the gateway's own 404 `not_found` on lookup are definite; a connect
//! failure (refused, DNS, TLS handshake, connect timeout: nothing was
//! written) is *not sent*, a 429 or a 503 with `Retry-After` *not
//! executed*, and so is a 301/302/307/308 to a create (never followed: the
//! request was not processed at this URL, and is never sent to another
//! host); everything else (timeouts, resets, other 5xx, 401/403/404 from
//! something that may not be the gateway, a 303 or another 3xx, an answer
//! past its cap) is unknown, and a redirected lookup failed (never "not
//! found"). Every text of an answer is made fit to store where it is parsed
//! ([`crate::domain::text`]): an id that cannot be stored as it is reads as
//! a missing one (an approval without it is unknown), every other text is
//! escaped and bounded.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::FutureExt;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tracing::warn;

use super::{
    ChargeCall, ChargeOutcome, Deferral, Evidence, Gateway, GatewayRecord, ListError, Listed,
    LookupCall, LookupOutcome, RefundCall, settlement,
};
use crate::domain::IdempotencyKey;
use crate::domain::text::{self, Kind};

pub(super) mod body;
pub(super) mod client;
mod list;
mod wire;

pub(crate) use wire::retry_after;
use wire::{Answer, not_executed, read};
pub(super) use wire::{Redirect, Transport, head, redirect, transport, transport_kind};

pub use client::{GatewayConfigError, parse_base_url, shown_url};

/// `Debug` shows the URL without user name or password.
#[derive(Clone)]
pub struct HttpGatewayConfig {
    /// `http://…` or `https://…`, e.g. `http://127.0.0.1:8089`
    pub base_url: String,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    /// A PEM file of extra root certificates to trust (`COBRO_GATEWAY_CA_FILE`).
    pub ca_file: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for HttpGatewayConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpGatewayConfig")
            .field("base_url", &shown_url(&self.base_url))
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

pub struct HttpGateway {
    base: String,
    client: reqwest::Client,
}

/// What a call creates and looks up: it picks the path, the id field of the
/// reply and the names the evidence uses.
#[derive(Debug, Clone, Copy)]
enum Resource {
    Charges,
    Refunds,
}

impl Resource {
    fn path(self) -> &'static str {
        match self {
            Resource::Charges => "/v1/charges",
            Resource::Refunds => "/v1/refunds",
        }
    }

    /// `Evidence.call` of a create.
    fn call(self) -> &'static str {
        match self {
            Resource::Charges => "charge",
            Resource::Refunds => "refund",
        }
    }

    /// `Evidence.call` of a lookup.
    fn lookup_call(self) -> &'static str {
        match self {
            Resource::Charges => "lookup",
            Resource::Refunds => "refund_lookup",
        }
    }

    /// The gateway's id of what was created: `charge_id` of a charge,
    /// `refund_id` of a refund (whose `charge_id` is the refunded charge).
    fn take_id(self, reply: &mut Reply) -> Option<String> {
        match self {
            Resource::Charges => reply.charge_id.take(),
            Resource::Refunds => reply.refund_id.take(),
        }
    }
}

#[derive(Serialize)]
struct ChargeBody<'a> {
    order_id: &'a str,
    amount_minor: i64,
    currency: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    payment_method: Option<&'a str>,
}

#[derive(Serialize)]
struct RefundBody<'a> {
    charge_id: &'a str,
    order_id: &'a str,
    amount_minor: i64,
    currency: &'a str,
}

/// The fields of a charge or refund answer (or error) the adapter reads,
/// made fit to store by [`Reply::tidied`] as soon as they are parsed.
#[derive(Deserialize)]
struct Reply {
    #[serde(default)]
    charge_id: Option<String>,
    #[serde(default)]
    refund_id: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    decline_code: Option<String>,
    /// The card network's advice with a decline (Mastercard's merchant
    /// advice code) and the issuer's raw response code, as Stripe names them.
    #[serde(default)]
    network_advice_code: Option<String>,
    #[serde(default)]
    network_decline_code: Option<String>,
    #[serde(default)]
    error: Option<String>,
    /// The card's network, allow-listed as it is parsed (a junk value is
    /// `None`, never a failed parse).
    #[serde(default, deserialize_with = "brand")]
    card_brand: Option<String>,
    /// Why an id of the answer was dropped as unusable ([`text::id`]).
    #[serde(skip)]
    unusable: Option<String>,
}

/// The simulator's `card_brand`, allow-listed ([`crate::domain::card_caps::card_brand`]).
fn brand<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let raw: Option<serde_json::Value> = Option::deserialize(d)?;
    Ok(crate::domain::card_caps::card_brand_in(raw.as_ref()))
}

impl Reply {
    /// The answer as cobro keeps it: an id that cannot be stored as it is
    /// reads as missing (noted in `unusable`), every other text escaped and
    /// bounded ([`text::stored`]).
    fn tidied(mut self) -> Self {
        for (field, slot) in [
            ("charge_id", &mut self.charge_id),
            ("refund_id", &mut self.refund_id),
        ] {
            let Some(raw) = slot.take() else { continue };
            match text::id(&raw) {
                Ok(_) => *slot = Some(raw),
                Err(why) => {
                    let note = text::unusable(field, &raw, &why);
                    warn!(%note, "the gateway answered an id cobro cannot store; read as missing");
                    self.unusable = Some(note);
                }
            }
        }
        let texts = [
            &mut self.status,
            &mut self.decline_code,
            &mut self.network_advice_code,
            &mut self.network_decline_code,
            &mut self.error,
        ];
        for s in texts.into_iter().flatten() {
            *s = text::stored(s, Kind::Code);
        }
        self
    }

    /// The decline code to store: the gateway's, with the network's advice
    /// as a suffix ([`super::advice`]).
    fn decline(&self) -> String {
        use super::advice::{NetworkCodes, advise, stored};
        let advice = advise(&NetworkCodes {
            advice_code: None,
            network_advice_code: self.network_advice_code.as_deref(),
            network_decline_code: self.network_decline_code.as_deref(),
        });
        stored(self.decline_code.as_deref().unwrap_or("declined"), advice)
    }
}

impl HttpGateway {
    /// Refuses, before any call, a `GATEWAY_URL` that is not http(s) with a
    /// host, and a `COBRO_GATEWAY_CA_FILE` without certificates.
    pub fn new(cfg: HttpGatewayConfig) -> Result<Self, GatewayConfigError> {
        let base = parse_base_url(&cfg.base_url)?;
        let client = client::build(
            cfg.connect_timeout,
            cfg.request_timeout,
            cfg.ca_file.as_deref(),
        )?;
        Ok(Self { base, client })
    }

    async fn do_charge(&self, call: &ChargeCall) -> ChargeOutcome {
        let body = ChargeBody {
            order_id: call.order_id.as_str(),
            amount_minor: call.amount.minor(),
            currency: call.currency.code(),
            payment_method: call.payment_method.as_ref().map(|p| p.token()),
        };
        self.create(Resource::Charges, call.key, &body).await
    }

    async fn do_refund(&self, call: &RefundCall) -> ChargeOutcome {
        let body = RefundBody {
            charge_id: &call.charge_id,
            order_id: call.order_id.as_str(),
            amount_minor: call.amount.minor(),
            currency: call.currency.code(),
        };
        self.create(Resource::Refunds, call.key, &body).await
    }

    /// `POST {base}{path}` with the key in `Idempotency-Key`, classified.
    async fn create(
        &self,
        resource: Resource,
        key: IdempotencyKey,
        body: &impl Serialize,
    ) -> ChargeOutcome {
        let started = Instant::now();
        let sent = self
            .client
            .post(format!("{}{}", self.base, resource.path()))
            .header("Idempotency-Key", key.to_string())
            .json(body)
            .send()
            .await;
        let call = resource.call();
        match read(sent).await {
            Ok(answer) => classify_create(resource, answer, started),
            Err(t) => {
                let evidence = evidence(call, t.status(), t.kind(), t.detail(), started);
                match t {
                    Transport::NotSent(_) => ChargeOutcome::Deferred {
                        why: Deferral::NotSent,
                        retry_after: None,
                        evidence,
                    },
                    // An answer too large to read came after the request
                    // left: the gateway may have executed it.
                    Transport::Unknown(_) | Transport::TooLarge { .. } => {
                        ChargeOutcome::Unknown { evidence }
                    }
                }
            }
        }
    }

    /// `GET {base}{path}/{key}`, classified.
    async fn look_up(&self, resource: Resource, key: IdempotencyKey) -> LookupOutcome {
        let started = Instant::now();
        let sent = self
            .client
            .get(format!("{}{}/{key}", self.base, resource.path()))
            .send()
            .await;
        match read(sent).await {
            Ok(answer) => classify_lookup(resource, answer, started),
            Err(t @ Transport::NotSent(_)) => LookupOutcome::Deferred {
                why: Deferral::NotSent,
                retry_after: None,
                evidence: lookup_evidence(resource, None, t.kind(), "not_sent", started),
            },
            Err(t @ (Transport::Unknown(_) | Transport::TooLarge { .. })) => {
                LookupOutcome::Failed {
                    evidence: Evidence {
                        http_status: t.status(),
                        detail: t.detail(),
                        ..lookup_evidence(resource, None, t.kind(), "failed", started)
                    },
                }
            }
        }
    }
}

/// What a create call (`POST`) answered: only a parsed 200 approval, a 402
/// whose body says declined and a 400/422 carrying the gateway's `error`
/// are definite; a 429, or a 503 with `Retry-After`, was not executed.
fn classify_create(resource: Resource, answer: Answer, started: Instant) -> ChargeOutcome {
    let call = resource.call();
    let Answer {
        code,
        retry_after,
        location,
        reply,
    } = answer;
    let ev = |kind: &str, detail: Option<String>| evidence(call, Some(code), kind, detail, started);
    if let Some(kind) = not_executed(code, retry_after) {
        return ChargeOutcome::Deferred {
            why: Deferral::NotExecuted,
            retry_after,
            evidence: ev(kind, reply.and_then(|r| r.error)),
        };
    }
    if let Some(r) = redirect(call, code, location.as_deref()) {
        let evidence = ev("redirected", Some(r.detail));
        return match r.not_executed {
            true => ChargeOutcome::Deferred {
                why: Deferral::NotExecuted,
                retry_after,
                evidence,
            },
            false => ChargeOutcome::Unknown { evidence },
        };
    }
    match (code, reply) {
        (200, Some(mut r)) if r.status.as_deref() == Some("approved") => {
            match resource.take_id(&mut r) {
                Some(charge_id) => ChargeOutcome::Approved {
                    charge_id,
                    evidence: Evidence {
                        card_brand: r.card_brand.take(),
                        ..ev("ok", None)
                    },
                },
                // No id, or one that cannot be stored: an approval we
                // cannot record is not one (looked up, then finance).
                None => bad_body(call, code, r.unusable, &ev),
            }
        }
        // A decline is the gateway's own answer: its body says so. A 402,
        // 400 or 422 with another body (a proxy's, a firewall's) falls
        // through to the unexpected 4xx below, and is looked up.
        (402, Some(mut r)) if r.status.as_deref() == Some("declined") => ChargeOutcome::Declined {
            charge_id: resource.take_id(&mut r),
            code: r.decline(),
            evidence: Evidence {
                card_brand: r.card_brand.take(),
                ..ev("declined", r.unusable)
            },
        },
        (408 | 409 | 425, r) => ChargeOutcome::Unknown {
            evidence: ev("http_4xx_retryable", r.and_then(|r| r.error)),
        },
        // The gateway refused the request as such: never executed.
        (
            400 | 422,
            Some(Reply {
                error: Some(error), ..
            }),
        ) => ChargeOutcome::Declined {
            code: error.clone(),
            charge_id: None,
            evidence: ev("http_4xx", Some(error)),
        },
        // 401, 403, 404, ...: credentials, a firewall or a proxy may be
        // answering, not the gateway. Not a decline: look it up.
        (400..=499, r) => ChargeOutcome::Unknown {
            evidence: ev("http_4xx_unexpected", r.and_then(|r| r.error)),
        },
        (500..=599, _) => ChargeOutcome::Unknown {
            evidence: ev("http_5xx", None),
        },
        (_, _) => bad_body(call, code, None, &ev),
    }
}

/// An answer that is none of the expected ones: unknown. `why`: what was
/// wrong with it, when known.
fn bad_body(
    call: &str,
    code: u16,
    why: Option<String>,
    ev: &impl Fn(&str, Option<String>) -> Evidence,
) -> ChargeOutcome {
    let mut detail = format!("unexpected answer to a {call} (HTTP {code})");
    if let Some(why) = why {
        detail.push_str(": ");
        detail.push_str(&why);
    }
    ChargeOutcome::Unknown {
        evidence: ev("bad_body", Some(detail)),
    }
}

/// What a lookup (`GET .../{key}`) answered: a parsed 200 and the gateway's
/// own 404 `not_found` are definite; a 429, or a 503 with `Retry-After`, is
/// deferred; anything else failed.
fn classify_lookup(resource: Resource, answer: Answer, started: Instant) -> LookupOutcome {
    let Answer {
        code,
        retry_after,
        location,
        reply,
    } = answer;
    let ev =
        |kind: &str, result: &str| lookup_evidence(resource, Some(code), kind, result, started);
    // A redirected lookup got no answer: failed, never "not found".
    if let Some(r) = redirect(resource.lookup_call(), code, location.as_deref()) {
        return LookupOutcome::Failed {
            evidence: Evidence {
                detail: Some(r.detail),
                ..ev("redirected", "failed")
            },
        };
    }
    if let Some(kind) = not_executed(code, retry_after) {
        return LookupOutcome::Deferred {
            why: Deferral::NotExecuted,
            retry_after,
            evidence: ev(kind, "not_executed"),
        };
    }
    match (code, reply) {
        (200, Some(mut r)) => {
            let id = resource.take_id(&mut r);
            match (r.status.as_deref(), id) {
                (Some("approved"), Some(charge_id)) => LookupOutcome::Approved {
                    charge_id,
                    evidence: ev("ok", "approved"),
                },
                (Some("declined"), charge_id) => LookupOutcome::Declined {
                    code: r.decline(),
                    charge_id,
                    evidence: Evidence {
                        detail: r.unusable,
                        card_brand: r.card_brand,
                        ..ev("ok", "declined")
                    },
                },
                _ => LookupOutcome::Failed {
                    evidence: Evidence {
                        detail: r.unusable,
                        ..ev("bad_body", "failed")
                    },
                },
            }
        }
        // Only the gateway's own "not found" counts; a bare 404 may come
        // from a proxy or a wrong URL, and re-sending on it is a guess.
        (404, Some(r)) if r.error.as_deref() == Some("not_found") => LookupOutcome::NotFound {
            evidence: ev("not_found", "not_found"),
        },
        (404, _) => LookupOutcome::Failed {
            evidence: ev("http_404_unconfirmed", "failed"),
        },
        (500..=599, _) => LookupOutcome::Failed {
            evidence: ev("http_5xx", "failed"),
        },
        _ => LookupOutcome::Failed {
            evidence: ev("http_other", "failed"),
        },
    }
}

fn evidence(
    call: &str,
    http_status: Option<u16>,
    kind: &str,
    detail: Option<String>,
    started: Instant,
) -> Evidence {
    Evidence {
        call: call.into(),
        http_status,
        error_kind: kind.into(),
        lookup_result: None,
        elapsed_ms: started.elapsed().as_millis() as u64,
        detail: detail.map(|d| text::stored(&d, Kind::Message)),
        card_brand: None,
    }
}

fn lookup_evidence(
    resource: Resource,
    http_status: Option<u16>,
    kind: &str,
    result: &str,
    started: Instant,
) -> Evidence {
    Evidence {
        lookup_result: Some(result.into()),
        ..evidence(resource.lookup_call(), http_status, kind, None, started)
    }
}

impl Gateway for HttpGateway {
    fn charge<'a>(&'a self, call: &'a ChargeCall) -> BoxFuture<'a, ChargeOutcome> {
        self.do_charge(call).boxed()
    }

    fn lookup<'a>(&'a self, call: &'a LookupCall) -> BoxFuture<'a, LookupOutcome> {
        self.look_up(Resource::Charges, call.key).boxed()
    }

    fn refund<'a>(&'a self, call: &'a RefundCall) -> BoxFuture<'a, ChargeOutcome> {
        self.do_refund(call).boxed()
    }

    fn lookup_refund<'a>(&'a self, call: &'a LookupCall) -> BoxFuture<'a, LookupOutcome> {
        self.look_up(Resource::Refunds, call.key).boxed()
    }

    fn list<'a>(
        &'a self,
        kind: Listed,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<Vec<GatewayRecord>, ListError>> {
        self.list_all(kind, from, to).boxed()
    }

    fn settlement<'a>(
        &'a self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<settlement::Settlement, settlement::SettleError>> {
        // The simulator honours `created[gte]`/`created[lt]`.
        async move { settlement::read(self, from, to, true).await }.boxed()
    }
}
