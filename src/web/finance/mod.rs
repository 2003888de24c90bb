//! Finance on the web process: the escalation queue as a JSON API
//! (`/finance/api/...`), a CSV export and a server-rendered HTML page
//! (`/finance`), all behind authentication ([`auth`]).
//!
//! Invariant: every route here answers 401 without valid credentials, and
//! every action calls the one implementation in [`crate::finance`] with the
//! authenticated user's name (never a name from the request body).

mod api;
pub mod auth;
mod cases;
mod page;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use clap::Args;

use crate::store::Store;

/// Settings of the finance routes of `cobro serve`.
#[derive(Clone, Args)]
pub struct FinanceArgs {
    /// Finance users as `name:secret,…` (secrets of at least 16
    /// characters). Basic auth with name and secret, or `Bearer <secret>`.
    /// Empty: every finance route answers 401.
    #[arg(
        long,
        env = "COBRO_FINANCE_USERS",
        default_value = "",
        hide_env_values = true,
        hide_default_value = true
    )]
    pub finance_users: String,
    /// A DESCONOCIDO attempt older than this reaches finance.
    #[arg(long, env = "COBRO_STALE_AFTER", default_value = "1h", value_parser = super::duration)]
    pub stale_after: Duration,
}

impl std::fmt::Debug for FinanceArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FinanceArgs")
            .field("finance_users", &"<redacted>")
            .field("stale_after", &self.stale_after)
            .finish()
    }
}

/// What the finance routes need.
#[derive(Debug, Clone)]
pub struct FinanceConfig {
    pub users: auth::Users,
    pub stale_after: Duration,
    /// For manual business retries: the same maximum as the workers'.
    pub max_attempts: u32,
}

impl FinanceArgs {
    pub fn config(&self, max_attempts: u32) -> Result<FinanceConfig, String> {
        Ok(FinanceConfig {
            users: auth::Users::parse(&self.finance_users)
                .map_err(|e| format!("COBRO_FINANCE_USERS: {e}"))?,
            stale_after: self.stale_after,
            max_attempts,
        })
    }
}

pub(crate) struct Finance {
    pub(crate) store: Store,
    pub(crate) cfg: FinanceConfig,
}

pub(crate) type FinanceState = State<Arc<Finance>>;

/// The authenticated user, put in the request by the auth layer.
#[derive(Debug, Clone)]
pub(crate) struct Person(pub(crate) String);

/// The finance routes (merge them into the web process's router).
pub fn router(store: Store, cfg: FinanceConfig) -> Router {
    let state = Arc::new(Finance { store, cfg });
    Router::new()
        .route("/finance", get(page::list))
        .route("/finance/attempts/{id}", get(page::detail))
        .route("/finance/attempts/{id}/resolve", post(page::resolve))
        .route("/finance/summary", get(page::summary))
        .route("/finance/escalations.csv", get(api::csv))
        .route("/finance/api/escalations", get(api::list))
        .route("/finance/api/attempts/{id}", get(api::detail))
        .route("/finance/api/attempts/{id}/resolve", post(api::resolve))
        .route("/finance/api/attempts/{id}/retry", post(api::retry))
        .route("/finance/api/summary", get(api::summary))
        .route("/finance/cases/{id}/resolve", post(cases::resolve))
        .route("/finance/api/cases/{id}/resolve", post(api::resolve_case))
        .route_layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .with_state(state)
}

async fn authenticate(State(fin): FinanceState, mut req: Request, next: Next) -> Response {
    let Some(name) = fin.cfg.users.authenticate(req.headers()) else {
        let message = if fin.cfg.users.is_empty() {
            "finance access is not configured (set COBRO_FINANCE_USERS)"
        } else {
            "authentication required: Basic auth with your finance user, or a Bearer secret"
        };
        let mut resp = super::error(StatusCode::UNAUTHORIZED, None, message);
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"cobro finance\", charset=\"UTF-8\""),
        );
        return resp;
    };
    let person = Person(name.to_owned());
    req.extensions_mut().insert(person);
    let mut resp = next.run(req).await;
    // Finance data is never cached by a browser or a proxy.
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp.into_response()
}
