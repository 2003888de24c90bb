//! `GET /health` and `GET /ready`: public, bounded, and saying nothing but
//! whether this process can do its work (and, when not, what to run).
//!
//! - `/ready` answers 200 `{"ok":true}` only when the database answers and
//!   its schema is the one this binary was built for (cobro's applied
//!   migrations against the binary's); otherwise 503 with a `reason` that
//!   names `cobro migrate` or says the database did not answer.
//! - `/health` answers 200 while the database answers and has a schema; it
//!   fails (503) on a database that was never migrated, where every API
//!   call would fail, but not on a schema one migration behind: during a
//!   rolling deploy the old binary's process is still healthy, only not
//!   ready for the new one. A load balancer should route on `/ready`.
//!
//! Invariant: each answer takes at most [`DEADLINE`]; error details that
//! could name hosts, users or files go to the log only. Anyone may call
//! them, past the connection limit: one look at the database serves every
//! call for [`FRESH`], and calls that come while it runs wait for it
//! ([`Probe`]), so a flood of probes costs one query a second, never the
//! pool the webhooks write through.

use std::future::Future;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Json, extract::State};
use serde_json::json;
use tracing::warn;

use super::AppState;
use crate::store::{Readiness, Store};

/// The longest either route waits for the database.
pub const DEADLINE: Duration = Duration::from_secs(2);

/// How long one look at the database answers every call.
pub const FRESH: Duration = Duration::from_secs(1);

/// What the database said, within the deadline.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Schema(Readiness),
    Unreachable,
}

/// The last look at the database and when it was taken, shared by every
/// call of the process's health routes.
#[derive(Default)]
pub(crate) struct Probe {
    last: tokio::sync::Mutex<Option<(Instant, Seen)>>,
}

impl Probe {
    /// The last look if younger than [`FRESH`], else a new one by `look`
    /// (one at a time: the calls meanwhile wait for it); at most
    /// [`DEADLINE`] in all, the database counted unreachable past it.
    async fn seen<F, Fut>(&self, look: F) -> Seen
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Seen>,
    {
        let fetch = async {
            let mut last = self.last.lock().await;
            if let Some((at, seen)) = last.as_ref()
                && at.elapsed() < FRESH
            {
                return seen.clone();
            }
            let seen = look().await;
            *last = Some((Instant::now(), seen.clone()));
            seen
        };
        tokio::time::timeout(DEADLINE, fetch)
            .await
            .unwrap_or(Seen::Unreachable)
    }
}

async fn look(store: &Store) -> Seen {
    match tokio::time::timeout(DEADLINE, store.readiness()).await {
        Ok(Ok(r)) => Seen::Schema(r),
        Ok(Err(e)) => {
            warn!(error = %e, "health: the database did not answer");
            Seen::Unreachable
        }
        Err(_) => {
            warn!(deadline = ?DEADLINE, "health: the database did not answer in time");
            Seen::Unreachable
        }
    }
}

fn unavailable(body: serde_json::Value) -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

#[utoipa::path(
    get,
    path = "/health",
    operation_id = "get_health",
    summary = "Liveness",
    tag = "operations",
    description = "Liveness: 200 while the database answers and has a schema; answered even past the connection limit. No credential.",
    responses(
        (status = 200, description = "The database answers.", body = crate::web::openapi::Health),
        (status = 503, description = "The database is unreachable, or was never migrated (`reason` names `cobro migrate`).", body = crate::web::openapi::Health)
    ),
    security(())
)]
pub(super) async fn health(State(app): AppState) -> Response {
    let backend = app.store.backend();
    match app.health.seen(|| look(&app.store)).await {
        Seen::Schema(Readiness::Missing) => unavailable(json!({
            "ok": false,
            "database": backend,
            "reason": Readiness::Missing.problem(),
        })),
        Seen::Schema(_) => Json(json!({"ok": true, "database": backend})).into_response(),
        Seen::Unreachable => unavailable(json!({"ok": false, "database": "unreachable"})),
    }
}

#[utoipa::path(
    get,
    path = "/ready",
    operation_id = "get_ready",
    summary = "Readiness",
    tag = "operations",
    description = "Readiness, for a load balancer: 200 only when the database answers and has every migration of this binary; at most 2 s; answered even past the connection limit. No credential.",
    responses(
        (status = 200, description = "Ready.", body = crate::web::openapi::Health),
        (status = 503, description = "Not ready: `reason` says why.", body = crate::web::openapi::Health)
    ),
    security(())
)]
pub(super) async fn ready(State(app): AppState) -> Response {
    match app.health.seen(|| look(&app.store)).await {
        Seen::Schema(r) => match r.problem() {
            None => Json(json!({"ok": true})).into_response(),
            Some(reason) => unavailable(json!({"ok": false, "reason": reason})),
        },
        Seen::Unreachable => unavailable(json!({
            "ok": false,
            "reason": "the database did not answer",
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn a_flood_of_probes_looks_at_the_database_once_a_second() {
        let probe = Arc::new(Probe::default());
        let looks = Arc::new(AtomicUsize::new(0));
        let call = |probe: Arc<Probe>, looks: Arc<AtomicUsize>| async move {
            probe
                .seen(|| async {
                    looks.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Seen::Schema(Readiness::Ready)
                })
                .await
        };
        let calls: Vec<_> = (0..200)
            .map(|_| tokio::spawn(call(probe.clone(), looks.clone())))
            .collect();
        for c in calls {
            assert_eq!(c.await.unwrap(), Seen::Schema(Readiness::Ready));
        }
        assert_eq!(looks.load(Ordering::SeqCst), 1, "200 calls, one look");
        // Past FRESH, the next call looks again.
        tokio::time::sleep(FRESH).await;
        call(probe.clone(), looks.clone()).await;
        assert_eq!(looks.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_look_that_hangs_answers_unreachable_at_the_deadline() {
        let probe = Probe::default();
        let started = Instant::now();
        let seen = probe
            .seen(|| async {
                tokio::time::sleep(DEADLINE * 3).await;
                Seen::Schema(Readiness::Ready)
            })
            .await;
        assert_eq!(seen, Seen::Unreachable);
        assert!(started.elapsed() < DEADLINE + Duration::from_millis(500));
    }
}
