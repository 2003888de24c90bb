//! The HTTP adapter for the simulator's API (`POST /v1/charges` with an
//! `Idempotency-Key` header, `GET /v1/charges/{key}`).
//!
//! Invariant: explicit connect and request timeouts on every call, and every
//! failure classified: only a parsed 200 (approved), 402/400/422 (declined or
//! refused, never executed) and the gateway's own 404 `not_found` on lookup
//! are definite; everything else (timeouts, resets, 5xx, 401/403/404 from
//! something that may not be the gateway) is unknown.

use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use super::{ChargeCall, ChargeOutcome, Evidence, Gateway, LookupOutcome};
use crate::domain::IdempotencyKey;

#[derive(Debug, Clone)]
pub struct HttpGatewayConfig {
    /// e.g. `http://127.0.0.1:8089`
    pub base_url: String,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
}

pub struct HttpGateway {
    base: String,
    client: reqwest::Client,
}

#[derive(Serialize)]
struct ChargeBody<'a> {
    order_id: &'a str,
    amount_minor: i64,
    currency: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    payment_method: Option<&'a str>,
}

#[derive(Deserialize)]
struct ChargeReply {
    #[serde(default)]
    charge_id: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    decline_code: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

impl HttpGateway {
    pub fn new(cfg: HttpGatewayConfig) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .connect_timeout(cfg.connect_timeout)
            .timeout(cfg.request_timeout)
            .pool_idle_timeout(Duration::from_secs(30))
            .build()?;
        Ok(Self {
            base: cfg.base_url.trim_end_matches('/').to_owned(),
            client,
        })
    }

    async fn do_charge(&self, call: &ChargeCall) -> ChargeOutcome {
        let started = Instant::now();
        let body = ChargeBody {
            order_id: call.order_id.as_str(),
            amount_minor: call.amount.minor(),
            currency: call.currency.code(),
            payment_method: call.payment_method.as_ref().map(|p| p.token()),
        };
        let sent = self
            .client
            .post(format!("{}/v1/charges", self.base))
            .header("Idempotency-Key", call.key.to_string())
            .json(&body)
            .send()
            .await;
        let (status, reply) = match read(sent).await {
            Ok(r) => r,
            Err(kind) => {
                return ChargeOutcome::Unknown {
                    evidence: evidence("charge", None, kind, None, started),
                };
            }
        };
        let code = status.as_u16();
        let ev = |kind: &str, detail: Option<String>| {
            evidence("charge", Some(code), kind, detail, started)
        };
        match (code, reply) {
            (200, Some(r)) if r.status.as_deref() == Some("approved") && r.charge_id.is_some() => {
                ChargeOutcome::Approved {
                    charge_id: r.charge_id.unwrap_or_default(),
                    evidence: ev("ok", None),
                }
            }
            (402, Some(r)) => ChargeOutcome::Declined {
                code: r.decline_code.unwrap_or_else(|| "declined".into()),
                charge_id: r.charge_id,
                evidence: ev("declined", None),
            },
            (408 | 409 | 425 | 429, r) => ChargeOutcome::Unknown {
                evidence: ev("http_4xx_retryable", r.and_then(|r| r.error)),
            },
            // The gateway refused the request as such: never executed.
            (400 | 422, r) => ChargeOutcome::Declined {
                code: r
                    .as_ref()
                    .and_then(|r| r.error.clone())
                    .unwrap_or_else(|| format!("http_{code}")),
                charge_id: None,
                evidence: ev("http_4xx", r.and_then(|r| r.error)),
            },
            // 401, 403, 404, ...: credentials, a firewall or a proxy may be
            // answering, not the gateway. Not a decline: look it up.
            (400..=499, r) => ChargeOutcome::Unknown {
                evidence: ev("http_4xx_unexpected", r.and_then(|r| r.error)),
            },
            (500..=599, _) => ChargeOutcome::Unknown {
                evidence: ev("http_5xx", None),
            },
            (_, _) => ChargeOutcome::Unknown {
                evidence: ev(
                    "bad_body",
                    Some(format!("unexpected answer to a charge (HTTP {code})")),
                ),
            },
        }
    }

    async fn do_lookup(&self, key: IdempotencyKey) -> LookupOutcome {
        let started = Instant::now();
        let sent = self
            .client
            .get(format!("{}/v1/charges/{key}", self.base))
            .send()
            .await;
        let (status, reply) = match read(sent).await {
            Ok(r) => r,
            Err(kind) => {
                return LookupOutcome::Failed {
                    evidence: lookup_evidence(None, kind, "failed", started),
                };
            }
        };
        let code = status.as_u16();
        match (code, reply) {
            (200, Some(r)) => match (r.status.as_deref(), r.charge_id) {
                (Some("approved"), Some(charge_id)) => LookupOutcome::Approved {
                    charge_id,
                    evidence: lookup_evidence(Some(code), "ok", "approved", started),
                },
                (Some("declined"), charge_id) => LookupOutcome::Declined {
                    code: r.decline_code.unwrap_or_else(|| "declined".into()),
                    charge_id,
                    evidence: lookup_evidence(Some(code), "ok", "declined", started),
                },
                _ => LookupOutcome::Failed {
                    evidence: lookup_evidence(Some(code), "bad_body", "failed", started),
                },
            },
            // Only the gateway's own "not found" counts; a bare 404 may come
            // from a proxy or a wrong URL, and re-sending on it is a guess.
            (404, Some(r)) if r.error.as_deref() == Some("not_found") => LookupOutcome::NotFound {
                evidence: lookup_evidence(Some(code), "not_found", "not_found", started),
            },
            (404, _) => LookupOutcome::Failed {
                evidence: lookup_evidence(Some(code), "http_404_unconfirmed", "failed", started),
            },
            (500..=599, _) => LookupOutcome::Failed {
                evidence: lookup_evidence(Some(code), "http_5xx", "failed", started),
            },
            _ => LookupOutcome::Failed {
                evidence: lookup_evidence(Some(code), "http_other", "failed", started),
            },
        }
    }
}

/// Reads status and JSON body; a transport failure or an unreadable body is
/// returned as its error kind (always unknown to the caller).
async fn read(
    sent: Result<reqwest::Response, reqwest::Error>,
) -> Result<(reqwest::StatusCode, Option<ChargeReply>), &'static str> {
    let resp = sent.map_err(transport_kind)?;
    let status = resp.status();
    let bytes = resp.bytes().await.map_err(transport_kind)?;
    Ok((status, serde_json::from_slice(&bytes).ok()))
}

fn transport_kind(e: reqwest::Error) -> &'static str {
    if e.is_timeout() {
        "timeout"
    } else if e.is_connect() {
        "connect"
    } else {
        "connection_closed"
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
        detail,
    }
}

fn lookup_evidence(
    http_status: Option<u16>,
    kind: &str,
    result: &str,
    started: Instant,
) -> Evidence {
    Evidence {
        lookup_result: Some(result.into()),
        ..evidence("lookup", http_status, kind, None, started)
    }
}

impl Gateway for HttpGateway {
    fn charge<'a>(&'a self, call: &'a ChargeCall) -> BoxFuture<'a, ChargeOutcome> {
        self.do_charge(call).boxed()
    }

    fn lookup(&self, key: IdempotencyKey) -> BoxFuture<'_, LookupOutcome> {
        self.do_lookup(key).boxed()
    }
}
