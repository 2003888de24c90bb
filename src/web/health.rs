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
//! could name hosts, users or files go to the log only.

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Json, extract::State};
use serde_json::json;
use tracing::warn;

use super::AppState;
use crate::store::{Readiness, Store};

/// The longest either route waits for the database.
pub const DEADLINE: Duration = Duration::from_secs(2);

/// What the database said, within the deadline.
enum Seen {
    Schema(Readiness),
    Unreachable,
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
    match look(&app.store).await {
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
    match look(&app.store).await {
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
