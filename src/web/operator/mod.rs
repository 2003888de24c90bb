//! The operator view on the web process: every attempt, searched and
//! paginated ([`crate::operator`]), as JSON (`GET /attempts`) and as pages
//! (`/operator/attempts`, `/operator/attempts/{id}`); an attempt's JSON
//! detail is `GET /attempts/{id}` (the same handler as
//! `GET /charges/{attempt_id}`, in [`super`]).
//!
//! Who may look: a key with `attempts:read`; the JSON API takes only
//! `Authorization: Bearer`, the pages also the browser's Basic sign-in
//! (they only read, so they carry no forms that change anything).
//!
//! Invariant: read-only; every page shows the incident switch's banner
//! while sending is paused.

pub(super) mod api;
pub(super) mod page;

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::get;

use super::access::Guarded;
use crate::http::auth::ApiKeys;
use crate::store::Store;

pub(crate) struct Operator {
    pub(crate) store: Store,
}

pub(crate) type OperatorState = State<Arc<Operator>>;

/// The operator's routes, each behind `attempts:read` (as
/// [`super::access::GUARDED`] says).
pub(crate) fn router(store: Store, keys: Arc<ApiKeys>) -> Router {
    let state = Arc::new(Operator { store });
    Router::new()
        .guarded("/attempts", get(api::list), &keys)
        .guarded("/operator/attempts", get(page::list), &keys)
        .guarded("/operator/attempts/{id}", get(page::detail), &keys)
        .with_state(state)
}

/// The database failed: [`super::db_failed`].
fn db_failed(e: &crate::store::StoreError) -> axum::response::Response {
    super::db_failed(e, "operator request failed", "try again")
}
