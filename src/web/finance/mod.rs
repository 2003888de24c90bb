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
use axum::extract::State;
use axum::middleware;
use axum::routing::{get, post};
use clap::Args;

use super::access::Guarded;
use crate::http::auth::ApiKeys;
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

/// The finance routes, each behind the scope and credential
/// [`crate::web::access::GUARDED`] gives it (merge them into the web
/// process's router).
pub fn router(store: Store, cfg: FinanceConfig, keys: Arc<ApiKeys>) -> Router {
    let state = Arc::new(Finance { store, cfg });
    let json = || middleware::from_fn(json_only);
    Router::new()
        .guarded("/finance", get(page::list), &keys)
        .guarded("/finance/attempts/{id}", get(detail::detail), &keys)
        .guarded("/finance/summary", get(page::summary), &keys)
        .guarded("/finance/escalations.csv", get(export::csv), &keys)
        .guarded("/finance/settlements.csv", get(settled::csv), &keys)
        .guarded(
            "/finance/attempts/{id}/resolve",
            post(detail::resolve),
            &keys,
        )
        .guarded("/finance/cases/{id}/resolve", post(cases::resolve), &keys)
        .guarded(
            "/finance/cases/{id}/refund-duplicate",
            post(cases::refund_duplicate),
            &keys,
        )
        .guarded("/finance/check-now", post(page::check_now), &keys)
        .guarded("/finance/api/escalations", get(api::list), &keys)
        .guarded("/finance/api/attempts/{id}", get(api::detail), &keys)
        .guarded("/finance/api/summary", get(api::summary), &keys)
        .guarded(
            "/finance/api/attempts/{id}/resolve",
            post(api::resolve).layer(json()),
            &keys,
        )
        .guarded(
            "/finance/api/attempts/{id}/retry",
            post(api::retry).layer(middleware::from_fn(json_or_nothing)),
            &keys,
        )
        .guarded(
            "/finance/api/check-now",
            post(api::check_now).layer(json()),
            &keys,
        )
        .guarded(
            "/finance/api/cases/{id}/resolve",
            post(case_api::resolve_case).layer(json()),
            &keys,
        )
        .guarded(
            "/finance/api/cases/{id}/refund-duplicate",
            post(case_api::refund_duplicate).layer(json()),
            &keys,
        )
        .with_state(state)
}
