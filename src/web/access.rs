//! Who may call each guarded route: one table ([`GUARDED`]) of path, scope
//! and credential, which the routers build their guards from
//! ([`Guarded::guarded`]) and the OpenAPI document writes each operation's
//! `security`, its "Needs …" sentence and its 401 and 403 from
//! ([`super::openapi`]).
//!
//! Invariant: a guarded route's scope and credential are said here and
//! nowhere else, so the router and the document cannot disagree: mounting
//! a path with [`Guarded::guarded`] that the table lacks panics when the
//! router is built, and a row whose path the document lacks, or whose
//! operation states its own `security`, 401 or 403, panics when the
//! document is built. A guard covers every method of its path, as the
//! router mounts it. The routes that need no credential (the webhook
//! receiver, `/health`, `/ready`, `/openapi.json`, the stylesheet) and the
//! landing page, which checks its caller itself, are not in it.

use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::{Next, from_fn};
use axum::response::Response;
use axum::routing::MethodRouter;

use crate::http::auth::{ApiKeys, Guard, Scope, Via, same_origin};

use Credential::{ApiKey, Form, PageOrKey};
use Scope::{AttemptsRead, ChargesWrite, FinanceRead, FinanceWrite, MetricsRead, RefundsWrite};

/// How a guarded route's caller shows who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Credential {
    /// An API key by `Authorization: Bearer`: the JSON APIs and metrics.
    ApiKey,
    /// The browser's sign-in (Basic) or an API key (Bearer): the pages
    /// and downloads, which only read.
    PageOrKey,
    /// A page's form: the browser's sign-in (Basic) only, from a
    /// same-origin request; the handler checks the form token.
    Form,
}

impl Credential {
    fn via(self) -> Via {
        match self {
            Credential::ApiKey => Via::Bearer,
            Credential::PageOrKey => Via::Either,
            Credential::Form => Via::Basic,
        }
    }
}

/// One guarded path: the scope a key needs and how it is presented.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rule {
    pub(crate) path: &'static str,
    pub(crate) scope: Scope,
    pub(crate) credential: Credential,
}

const fn rule(path: &'static str, scope: Scope, credential: Credential) -> Rule {
    Rule {
        path,
        scope,
        credential,
    }
}

/// Every guarded path of the web process.
pub(crate) const GUARDED: &[Rule] = &[
    rule("/charges", ChargesWrite, ApiKey),
    rule("/charges/{attempt_id}", AttemptsRead, ApiKey),
    rule("/attempts/{attempt_id}", AttemptsRead, ApiKey),
    rule("/refunds", RefundsWrite, ApiKey),
    rule("/refunds/{refund_id}", AttemptsRead, ApiKey),
    rule("/orders/{order_id}/cancel", ChargesWrite, ApiKey),
    rule("/orders/{order_id}/payment-method", ChargesWrite, ApiKey),
    rule("/control/pause", FinanceWrite, ApiKey),
    rule("/control/resume", FinanceWrite, ApiKey),
    rule("/metrics", MetricsRead, ApiKey),
    // The operator's search, as JSON and as pages.
    rule("/attempts", AttemptsRead, ApiKey),
    rule("/operator/attempts", AttemptsRead, PageOrKey),
    rule("/operator/attempts/{id}", AttemptsRead, PageOrKey),
    // Finance's pages, their forms, and the JSON API.
    rule("/finance", FinanceRead, PageOrKey),
    rule("/finance/attempts/{id}", FinanceRead, PageOrKey),
    rule("/finance/summary", FinanceRead, PageOrKey),
    rule("/finance/escalations.csv", FinanceRead, PageOrKey),
    rule("/finance/settlements.csv", FinanceRead, PageOrKey),
    rule("/finance/attempts/{id}/resolve", FinanceWrite, Form),
    rule("/finance/cases/{id}/resolve", FinanceWrite, Form),
    rule("/finance/cases/{id}/refund-duplicate", FinanceWrite, Form),
    rule("/finance/check-now", FinanceWrite, Form),
    rule("/finance/api/escalations", FinanceRead, ApiKey),
    rule("/finance/api/attempts/{id}", FinanceRead, ApiKey),
    rule("/finance/api/summary", FinanceRead, ApiKey),
    rule("/finance/api/attempts/{id}/resolve", FinanceWrite, ApiKey),
    rule("/finance/api/attempts/{id}/retry", FinanceWrite, ApiKey),
    rule("/finance/api/check-now", FinanceWrite, ApiKey),
    rule("/finance/api/cases/{id}/resolve", FinanceWrite, ApiKey),
    rule(
        "/finance/api/cases/{id}/refund-duplicate",
        FinanceWrite,
        ApiKey,
    ),
];

/// The row of `path`, if it is guarded.
pub(crate) fn rule_of(path: &str) -> Option<&'static Rule> {
    GUARDED.iter().find(|r| r.path == path)
}

/// A router's guarded routes: `.guarded(path, route, &keys)` mounts
/// `route` at `path` behind the guard [`GUARDED`] gives the path (and, for
/// a form, the same-origin check).
pub(crate) trait Guarded {
    type State;
    fn guarded(
        self,
        path: &'static str,
        route: MethodRouter<Self::State>,
        keys: &Arc<ApiKeys>,
    ) -> Self;
}

impl<S: Clone + Send + Sync + 'static> Guarded for Router<S> {
    type State = S;

    fn guarded(self, path: &'static str, route: MethodRouter<S>, keys: &Arc<ApiKeys>) -> Self {
        let Some(rule) = rule_of(path) else {
            panic!("{path} is mounted as guarded but is not in web::access::GUARDED");
        };
        let route = match rule.credential {
            Form => route.layer(from_fn(same_origin_only)),
            ApiKey | PageOrKey => route,
        };
        let guard = Guard::new(keys.clone(), rule.scope, rule.credential.via());
        self.route(path, guard.on(route))
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_path_is_guarded_once() {
        for (i, r) in GUARDED.iter().enumerate() {
            assert!(
                GUARDED[..i].iter().all(|o| o.path != r.path),
                "{} is in GUARDED twice",
                r.path
            );
        }
    }
}
