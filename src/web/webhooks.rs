//! `POST /webhooks/gateway`: verify, then store once and apply.
//!
//! Invariant: the signature and timestamp are verified over the raw bytes
//! before anything is parsed or written; every rejection is answered 4xx
//! and counted (`cobro_webhooks_rejected_total`), but stored as a sample
//! only: at most one row per reason per minute (per process here, across
//! processes by the table's unique index), so a flood of forgeries cannot
//! fill the database or hold SQLite's write lock; a duplicate or a late
//! event is answered 2xx (an error would make the gateway retry for days).
//! The whole body must arrive within the webhook's own deadline
//! (`COBRO_WEBHOOK_BODY_TIMEOUT`, a few seconds: a gateway sends it at
//! once), tighter than the API's, so a sender trickling bytes holds a
//! connection for seconds, not for the request timeout.
//! What the event says reaches the store only through [`event::parse`]
//! ([`crate::domain::text`]); a rejection's detail is escaped and bounded
//! the same way before it is logged, stored or answered.

use std::collections::HashMap;
use std::sync::Mutex;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use tracing::{debug, info, warn};

use super::{AppState, error};
use crate::domain::text::{self, Kind};
use crate::webhook::{Rejection, event};

/// Headers worth keeping with a rejected delivery. Signatures are HMACs,
/// not secrets; nothing like `Authorization` or `Cookie` is ever kept.
const SAFE_HEADERS: [&str; 8] = [
    "content-type",
    "content-length",
    "user-agent",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "stripe-signature",
    "x-forwarded-for",
];

fn safe_headers(h: &HeaderMap) -> Value {
    let mut m = Map::new();
    for name in SAFE_HEADERS {
        if let Some(v) = h.get(name).and_then(|v| v.to_str().ok()) {
            m.insert(name.into(), Value::String(v.chars().take(512).collect()));
        }
    }
    Value::Object(m)
}

/// Which rejections get a row: the first of each reason in each minute.
#[derive(Default)]
pub(crate) struct RejectSampler {
    last: Mutex<HashMap<&'static str, i64>>,
}

impl RejectSampler {
    /// Whether this rejection is the first of its reason in `minute`.
    fn take(&self, reason: &'static str, minute: i64) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.get(reason) == Some(&minute) {
            return false;
        }
        last.insert(reason, minute);
        true
    }
}

#[utoipa::path(
    post,
    path = "/webhooks/gateway",
    operation_id = "post_webhooks_gateway",
    summary = "Receive a gateway webhook",
    tag = "gateway",
    description = "The gateway's webhook receiver: the event is verified by its signature (the webhook secrets), not by an API key. Mounted only when webhook secrets are set (else 404).",
    request_body(description = "The gateway's signed event (JSON).", content_type = "application/json"),
    responses(
        (status = 200, description = "Verified and recorded (or already known)."),
        (status = 400, description = "A signature header is missing or malformed, or the event is not one cobro reads."),
        (status = 401, description = "The signature does not verify."),
        (status = 404, description = "No webhook secrets are set: the receiver is not mounted."),
        (status = 408, description = "The body took too long to arrive."),
        (status = 413, description = "The body is larger than `COBRO_MAX_BODY_BYTES`."),
        (status = 415, description = "The body is not JSON."),
        (status = 503, description = "Nothing was stored (the database did not answer): the gateway retries.")
    ),
    security(())
)]
pub(super) async fn receive(State(app): AppState, req: Request) -> Response {
    let headers = req.headers().clone();
    let reject = |status: StatusCode, reason: &'static str, detail: String, size: usize| {
        let app = app.clone();
        let headers = safe_headers(&headers);
        // The detail may quote the sender's bytes: escaped and bounded.
        let detail = text::stored(&detail, Kind::Message);
        async move {
            crate::metrics::webhook_rejected(reason);
            let minute = chrono::Utc::now().timestamp().div_euclid(60);
            // A stranger can send rejections as fast as the connection
            // limit allows: the log and the table keep the first of each
            // reason a minute; the metric counts them all.
            let first = app.rejects.take(reason, minute);
            if first {
                warn!(reason, %detail, size, "webhook rejected (the first of its reason this minute; cobro_webhooks_rejected_total counts every one)");
            } else {
                debug!(reason, %detail, size, "webhook rejected");
            }
            if first
                && let Err(e) = app
                    .store
                    .record_rejected_webhook(reason, Some(&detail), &headers, size, minute)
                    .await
            {
                // Still a rejection, and still counted.
                warn!(error = %e, "could not record the rejected webhook");
            }
            error(status, None, format!("{reason}: {detail}"))
        }
    };
    let deadline = app.body_deadline;
    let Ok(body) = tokio::time::timeout(deadline, Bytes::from_request(req, &())).await else {
        let detail = format!("the body did not arrive within {deadline:?}");
        let mut resp = reject(StatusCode::REQUEST_TIMEOUT, "body_too_slow", detail, 0).await;
        // Whatever is still coming is not read: the connection is done.
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return resp;
    };
    let body = match body {
        Ok(body) => body,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            let detail = format!("over the limit of {} bytes", app.max_body);
            return reject(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", detail, 0).await;
        }
        Err(rejection) => {
            let detail = rejection.body_text();
            return reject(rejection.status(), "body_unreadable", detail, 0).await;
        }
    };
    let size = body.len();
    let json_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            ct.trim_start()
                .to_ascii_lowercase()
                .starts_with("application/json")
        });
    if !json_type {
        let detail = "Content-Type must be application/json".to_owned();
        return reject(StatusCode::UNSUPPORTED_MEDIA_TYPE, "not_json", detail, size).await;
    }
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    // The route is mounted only with secrets; without, nothing is verified
    // against nothing.
    let Some(verifier) = app.verifier.as_ref() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if let Err(rejection) = verifier.verify(&header, &body, chrono::Utc::now()) {
        let status = match rejection {
            Rejection::MissingHeader(_) | Rejection::MalformedHeader(_) => StatusCode::BAD_REQUEST,
            _ => StatusCode::UNAUTHORIZED,
        };
        return reject(status, rejection.reason(), rejection.to_string(), size).await;
    }
    let mut event = match event::parse(&body) {
        Ok(ev) => ev,
        Err(e) => {
            return reject(
                StatusCode::BAD_REQUEST,
                "malformed_body",
                e.to_string(),
                size,
            )
            .await;
        }
    };
    // No cobro key in the metadata: a PaymentIntent event still finds its
    // attempt by the PaymentIntent's id.
    if event.key.is_none()
        && let Some(pi) = event.gateway_object().filter(|id| id.starts_with("pi_"))
    {
        match app.store.attempt_by_gateway_ref(pi).await {
            Ok(found) => event.key = found.map(|a| a.idempotency_key),
            Err(e) => {
                warn!(event = %event.event_id, error = %e, "webhook not matched");
                return error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    None,
                    "could not match the event; retry",
                );
            }
        }
    }
    if let Err(e) = crate::webhook::dispute::open_case(&app.store, &event).await {
        warn!(event = %event.event_id, error = %e, "dispute case not opened; not storing the event");
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            None,
            "could not open the dispute case; retry",
        );
    }
    match app.store.record_webhook(&event, Some(&app.retry)).await {
        Ok(result) => {
            info!(event = %event.event_id, kind = %event.event_type, ?result, "webhook");
            if let crate::store::WebhookResult::Rescheduled { attempt_ids } = &result {
                crate::metrics::card_updated::retries_pulled_forward(attempt_ids.len());
                for id in attempt_ids {
                    info!(event = %event.event_id, attempt = %id, cause = "card_updated",
                        "the card was updated: its scheduled business retry pulled forward");
                }
            }
            crate::metrics::webhook_received(match &result {
                crate::store::WebhookResult::Duplicate => "duplicate",
                other => other.outcome_column(),
            });
            (
                StatusCode::OK,
                Json(json!({ "received": true, "outcome": result })),
            )
                .into_response()
        }
        Err(e) => {
            // A 5xx here is right: nothing was stored, the gateway retries.
            warn!(event = %event.event_id, error = %e, "webhook not stored");
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                "could not store the event; retry",
            )
        }
    }
}
