//! The gateway's HTTP client never follows a redirect (issue 27). A gateway
//! on 127.0.0.1 that answers a charge with 307 and a `Location` on a second
//! server (which counts requests, and would approve): the second server gets
//! nothing, and the attempt waits in `PENDIENTE` (not executed: sent again
//! later with the same key), never `DESCONOCIDO`, never `RECHAZADO`. A
//! lookup answered with a redirect is no answer (a spent check), never "not
//! found" (which could allow a re-send). Both backends, through a real
//! engine.

#[macro_use]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::http::{Method, StatusCode, Uri, header};
use axum::response::IntoResponse;
use cobro::domain::ChargeRequest;
use cobro::state::State;
use common::*;
use serde_json::json;

on_both_dbs!(
    a_charge_answered_307_is_not_executed_and_never_sent_to_the_other_host,
    a_lookup_answered_307_is_a_failed_check_never_not_found,
);

/// Where a followed redirect would land: counts every request, approves it.
async fn elsewhere() -> (String, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = hits.clone();
    let app = axum::Router::new().fallback(move || {
        seen.fetch_add(1, Ordering::SeqCst);
        async { axum::Json(json!({"status": "approved", "charge_id": "ch_elsewhere"})) }
    });
    let url = stand_in(app).await;
    (url, hits)
}

/// Enqueues `order` (`amount` USD minor units) and lets an engine on the
/// gateway at `url` handle one wake-up of it.
async fn one_wake_up(db: &TestDb, url: &str, order: &str, amount: i64) -> uuid::Uuid {
    let req = ChargeRequest::parse(order, amount, "USD", None, None).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;
    engine(&db.store, url, "moved-w").process(id).await.unwrap();
    id
}

/// The gateway: `POST` answered by `post`, `GET` redirected with 307 to the
/// same path at `to`, or the other way round.
async fn gateway(to: String, redirect_posts: bool) -> String {
    let app = axum::Router::new().fallback(move |method: Method, uri: Uri| {
        let location = format!("{to}{}", uri.path());
        async move {
            if (method == Method::POST) == redirect_posts {
                (
                    StatusCode::TEMPORARY_REDIRECT,
                    [(header::LOCATION, location)],
                )
                    .into_response()
            } else {
                // A bare 503: the charge's outcome is unknown.
                StatusCode::SERVICE_UNAVAILABLE.into_response()
            }
        }
    });
    stand_in(app).await
}

async fn a_charge_answered_307_is_not_executed_and_never_sent_to_the_other_host(db: &TestDb) {
    let (other, hits) = elsewhere().await;
    let url = gateway(other.clone(), true).await;
    // One wake-up: sent, redirected, deferred, sent again after the
    // (test-scaled) backoff, … until the handler's step limit.
    let id = one_wake_up(db, &url, "moved-1", 1_999).await;

    assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing reached {other}");
    let (a, _) = db.store.load(id).await.unwrap();
    assert_eq!(a.state, State::Pendiente, "waiting to be sent again");
    assert_eq!(a.check_count, 0, "nothing to look up");
    assert!(a.send_count >= 1);
    assert_eq!(a.gateway_charge_id, None);
    let p = path(&db.store, id).await;
    assert!(
        !p.iter()
            .any(|s| s == "DESCONOCIDO" || s == "RECHAZADO" || s == "APROBADO"),
        "{p:?}"
    );
    let log = db.store.transitions(id).await.unwrap();
    let deferred: Vec<_> = log
        .iter()
        .filter(|t| t.cause == "gateway_not_executed")
        .collect();
    assert!(!deferred.is_empty(), "{log:?}");
    for t in &deferred {
        assert_eq!(t.error_kind.as_deref(), Some("redirected"));
        assert_eq!(t.http_status, Some(307));
        let detail = t.evidence.as_ref().unwrap()["detail"].as_str().unwrap();
        assert!(
            detail.contains(&format!("{other}/v1/charges")) && detail.contains("never followed"),
            "{detail}"
        );
    }
}

async fn a_lookup_answered_307_is_a_failed_check_never_not_found(db: &TestDb) {
    let (other, hits) = elsewhere().await;
    let url = gateway(other.clone(), false).await;
    let id = one_wake_up(db, &url, "moved-2", 2_999).await;

    assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing reached {other}");
    let (a, _) = db.store.load(id).await.unwrap();
    assert_eq!(a.state, State::Desconocido, "still in doubt");
    assert_eq!(a.send_count, 1, "never re-sent on a redirected lookup");
    assert!(a.check_count >= 1, "the redirected lookups were checks");
    let checks = db.store.checks(id).await.unwrap();
    assert!(!checks.is_empty());
    for c in &checks {
        assert_eq!(
            (
                c.lookup_result.as_str(),
                c.http_status,
                c.error_kind.as_deref()
            ),
            ("failed", Some(307), Some("redirected")),
            "{c:?}"
        );
    }
}
