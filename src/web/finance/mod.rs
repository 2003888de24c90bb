//! Finance on the web process: the escalation queue as a JSON API
//! (`/finance/api/...`), a CSV export and a server-rendered HTML page
//! (`/finance`).
//!
//! Who may do what: reading needs `finance:read`, acting `finance:write`.
//! The JSON API takes only `Authorization: Bearer` and, on a POST, only
//! `application/json`; the pages take the browser's Basic sign-in (or a
//! Bearer key for the CSV), and their forms also need a same-origin request
//! and the form token, which is bound to the browser's sign-in (a cookie)
//! and expires (`COBRO_FORM_TOKEN_TTL`). Pages cannot be framed
//! ([`crate::web::html::security_headers`]). So another site can make a
//! signed-in browser do nothing here.
//!
//! Invariant: every action calls the one implementation in
//! [`crate::finance`] with the authenticated key's name (never a name from
//! the request body).

pub(super) mod api;
pub(super) mod case_api;
pub(super) mod cases;
pub(super) mod detail;
pub(super) mod export;
pub(super) mod gateway;
pub(super) mod page;
pub(super) mod settled;

pub(crate) use gateway::{banner, pause_banner};

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use clap::Args;

use crate::http::auth::{ApiKeys, Guard, Scope, Via, same_origin};
use crate::http::{json_only, json_or_nothing};
use crate::store::Store;

/// Settings of the finance routes of `cobro serve`.
#[derive(Debug, Clone, Args)]
pub struct FinanceArgs {
    /// A DESCONOCIDO attempt older than this reaches finance.
    #[arg(long, env = "COBRO_STALE_AFTER", default_value = "1h", value_parser = super::duration)]
    pub stale_after: Duration,
    /// How long a page's form stays good: a form posted later is refused
    /// (nothing changed) with a request to reload the page.
    #[arg(long, env = "COBRO_FORM_TOKEN_TTL", default_value = "2h", value_parser = super::duration)]
    pub form_token_ttl: Duration,
}

/// What the finance routes need.
#[derive(Debug, Clone)]
pub struct FinanceConfig {
    pub stale_after: Duration,
    /// How long a form token is accepted after its page was rendered.
    pub form_token_ttl: Duration,
    /// The card networks' caps a manual retry honours unless finance gives
    /// an override reason (`cobro serve` takes them from its retry settings).
    pub card_caps: crate::store::CardCaps,
}

/// How long a form stays good unless `COBRO_FORM_TOKEN_TTL` says otherwise.
pub const DEFAULT_FORM_TOKEN_TTL: Duration = Duration::from_secs(2 * 3600);

impl Default for FinanceConfig {
    fn default() -> Self {
        Self {
            stale_after: Duration::from_secs(3600),
            form_token_ttl: DEFAULT_FORM_TOKEN_TTL,
            card_caps: crate::retry::CardCapArgs::default().caps(),
        }
    }
}

impl FinanceArgs {
    pub fn config(&self) -> FinanceConfig {
        FinanceConfig {
            stale_after: self.stale_after,
            form_token_ttl: self.form_token_ttl,
            ..Default::default()
        }
    }
}

pub(crate) struct Finance {
    pub(crate) store: Store,
    pub(crate) cfg: FinanceConfig,
}

pub(crate) type FinanceState = State<Arc<Finance>>;

/// The finance routes, each behind its scope (merge them into the web
/// process's router).
pub fn router(store: Store, cfg: FinanceConfig, keys: Arc<ApiKeys>) -> Router {
    let state = Arc::new(Finance { store, cfg });
    let page = Guard::new(keys.clone(), Scope::FinanceRead, Via::Either);
    let form = Guard::new(keys.clone(), Scope::FinanceWrite, Via::Basic);
    let read = Guard::new(keys.clone(), Scope::FinanceRead, Via::Bearer);
    let write = Guard::new(keys, Scope::FinanceWrite, Via::Bearer);
    Router::new()
        .route("/finance", page.clone().on(get(page::list)))
        .route(
            "/finance/attempts/{id}",
            page.clone().on(get(detail::detail)),
        )
        .route("/finance/summary", page.clone().on(get(page::summary)))
        .route(
            "/finance/escalations.csv",
            page.clone().on(get(export::csv)),
        )
        .route("/finance/settlements.csv", page.on(get(settled::csv)))
        .route(
            "/finance/attempts/{id}/resolve",
            form.clone()
                .on(post(detail::resolve).layer(middleware::from_fn(same_origin_only))),
        )
        .route(
            "/finance/cases/{id}/resolve",
            form.clone()
                .on(post(cases::resolve).layer(middleware::from_fn(same_origin_only))),
        )
        .route(
            "/finance/cases/{id}/refund-duplicate",
            form.clone()
                .on(post(cases::refund_duplicate).layer(middleware::from_fn(same_origin_only))),
        )
        .route(
            "/finance/check-now",
            form.on(post(page::check_now).layer(middleware::from_fn(same_origin_only))),
        )
        .route("/finance/api/escalations", read.clone().on(get(api::list)))
        .route(
            "/finance/api/attempts/{id}",
            read.clone().on(get(api::detail)),
        )
        .route("/finance/api/summary", read.on(get(api::summary)))
        .route(
            "/finance/api/attempts/{id}/resolve",
            write
                .clone()
                .on(post(api::resolve).layer(middleware::from_fn(json_only))),
        )
        .route(
            "/finance/api/attempts/{id}/retry",
            write
                .clone()
                .on(post(api::retry).layer(middleware::from_fn(json_or_nothing))),
        )
        .route(
            "/finance/api/check-now",
            write
                .clone()
                .on(post(api::check_now).layer(middleware::from_fn(json_only))),
        )
        .route(
            "/finance/api/cases/{id}/resolve",
            write
                .clone()
                .on(post(case_api::resolve_case).layer(middleware::from_fn(json_only))),
        )
        .route(
            "/finance/api/cases/{id}/refund-duplicate",
            write.on(post(case_api::refund_duplicate).layer(middleware::from_fn(json_only))),
        )
        .with_state(state)
}

/// A form that changes something must come from our own page (the
/// browser says where it came from); the form token is checked after.
async fn same_origin_only(req: Request, next: Next) -> Response {
    if let Err(why) = same_origin(req.headers()) {
        let mut resp = super::error(
            StatusCode::FORBIDDEN,
            None,
            format!("{why}: nothing was changed"),
        );
        resp.headers_mut().insert(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("no-store"),
        );
        return resp;
    }
    next.run(req).await
}
