//! Who is calling: a request's `Authorization` matched against the API keys
//! ([`super::keys`]): `Bearer <secret>` (programs) or HTTP Basic
//! `name:secret` (a person's browser, finance pages only); the route's
//! [`Guard`] (scope and accepted means); the finance forms' token and the
//! same-origin check.
//!
//! Invariant: a request without a valid credential is 401, one whose key
//! lacks the route's scope is 403, and only then does the handler run, with
//! the key's name (the actor in the transition log) in its extensions;
//! nothing here logs or `Debug`-prints a secret, a hash or a form token.

use std::fmt;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::MethodRouter;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

pub use super::keys::{
    ApiKeyArgs, ApiKeys, SECRET_PREFIX, Scope, Scopes, generate, hash_hex, parse_scopes,
};
use super::keys::{hex, same};

impl ApiKeys {
    /// Who the headers authenticate, by the means the route allows.
    pub fn authenticate(&self, headers: &HeaderMap, via: Via) -> Result<Caller, Denied> {
        let Some(value) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        else {
            return Err(Denied::NoCredential);
        };
        let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
        let rest = rest.trim();
        let key = if scheme.eq_ignore_ascii_case("bearer") {
            if via == Via::Basic {
                return Err(Denied::WrongScheme);
            }
            self.by_secret(rest)
        } else if scheme.eq_ignore_ascii_case("basic") {
            if via == Via::Bearer {
                return Err(Denied::WrongScheme);
            }
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(rest)
                .ok()
                .and_then(|d| String::from_utf8(d).ok());
            decoded.and_then(|text| {
                let (name, secret) = text.split_once(':')?;
                self.by_secret(secret).filter(|k| k.name == name)
            })
        } else {
            return Err(Denied::WrongScheme);
        };
        let key = key.ok_or(Denied::BadCredential)?;
        Ok(Caller {
            name: key.name.clone(),
            scopes: key.scopes,
            form_key: key.hash,
        })
    }
}

/// How a route accepts credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// `Authorization: Bearer` only: the JSON APIs. A browser never sends
    /// it by itself, so another site cannot make it call them.
    Bearer,
    /// HTTP Basic only: the finance page's forms (the browser's login
    /// prompt), which also need the form token and a same-origin request.
    Basic,
    /// Either: read-only pages and downloads.
    Either,
}

/// Why a request was refused before its handler ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    NoCredential,
    WrongScheme,
    BadCredential,
}

/// Whether a state-changing browser request comes from our own pages: a
/// `Sec-Fetch-Site` other than `same-origin`, or an `Origin` whose host is
/// not the request's `Host`, is refused. A client that sends neither (not a
/// current browser) still needs the form token.
pub fn same_origin(headers: &HeaderMap) -> Result<(), &'static str> {
    let text = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    if let Some(site) = text("sec-fetch-site")
        && !site.eq_ignore_ascii_case("same-origin")
    {
        return Err("the request came from another site (Sec-Fetch-Site)");
    }
    if let Some(origin) = text("origin") {
        let host = text("host").unwrap_or("");
        let origin_host = origin
            .split_once("://")
            .map(|(_, rest)| rest.trim_end_matches('/'))
            .unwrap_or("");
        if origin_host.is_empty() || !origin_host.eq_ignore_ascii_case(host) {
            return Err("the request came from another origin (Origin)");
        }
    }
    Ok(())
}

/// The authenticated caller, put in the request's extensions.
#[derive(Clone)]
pub struct Caller {
    pub name: String,
    pub scopes: Scopes,
    /// Keys the form tokens (the stored hash: server-side, never sent).
    form_key: [u8; 32],
}

impl fmt::Debug for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Caller")
            .field("name", &self.name)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

impl Caller {
    /// Who this caller is in the transition log: `api:<name>`.
    pub fn actor(&self) -> String {
        format!("api:{}", self.name)
    }

    /// The token the finance page puts in its forms for this caller (hex
    /// HMAC-SHA256 of the name, keyed by the key's stored hash): another
    /// site cannot know it, so it cannot forge a form the browser would
    /// send with the person's Basic credentials.
    pub fn form_token(&self) -> String {
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.form_key) else {
            return String::new();
        };
        mac.update(b"cobro-finance-form:");
        mac.update(self.name.as_bytes());
        hex(&mac.finalize().into_bytes())
    }

    pub fn form_token_ok(&self, token: &str) -> bool {
        let (a, b) = (
            Sha256::digest(self.form_token().as_bytes()),
            Sha256::digest(token.as_bytes()),
        );
        same(&a.into(), &b.into())
    }
}

/// A route's requirement: the scope it needs and how it takes credentials.
#[derive(Clone)]
pub struct Guard {
    keys: Arc<ApiKeys>,
    scope: Scope,
    via: Via,
}

impl Guard {
    pub fn new(keys: Arc<ApiKeys>, scope: Scope, via: Via) -> Self {
        Self { keys, scope, via }
    }

    /// `route` with this guard in front of it.
    pub fn on<S: Clone + Send + Sync + 'static>(self, route: MethodRouter<S>) -> MethodRouter<S> {
        route.route_layer(middleware::from_fn_with_state(self, check))
    }
}

async fn check(State(guard): State<Guard>, mut req: Request, next: Next) -> Response {
    let caller = match guard.keys.authenticate(req.headers(), guard.via) {
        Ok(c) => c,
        Err(denied) => return unauthorized(&guard, denied),
    };
    if !caller.scopes.has(guard.scope) {
        tracing::info!(key = %caller.name, scope = %guard.scope, "refused: missing scope");
        return super::error(
            StatusCode::FORBIDDEN,
            None,
            format!(
                "the key {:?} does not have the scope {} this route needs",
                caller.name, guard.scope
            ),
        );
    }
    req.extensions_mut().insert(caller);
    let mut resp = next.run(req).await;
    // Payment data is never cached by a browser or a proxy.
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

fn unauthorized(guard: &Guard, denied: Denied) -> Response {
    let message = match (guard.keys.is_empty(), denied, guard.via) {
        (true, _, _) => "no API keys are configured (COBRO_API_KEYS): nobody may use this route",
        (_, Denied::WrongScheme, Via::Bearer) => {
            "this route takes only `Authorization: Bearer <secret>` (an API key)"
        }
        (_, Denied::WrongScheme, Via::Basic) => {
            "this form takes only the finance page's sign-in (HTTP Basic)"
        }
        _ => "authentication required",
    };
    let mut resp = super::error(StatusCode::UNAUTHORIZED, None, message);
    let challenge = match guard.via {
        Via::Bearer => "Bearer realm=\"cobro\"",
        Via::Basic | Via::Either => "Basic realm=\"cobro\", charset=\"UTF-8\"",
    };
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(challenge),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("authorization", value.parse().unwrap());
        h
    }

    fn basic(user: &str, pass: &str) -> String {
        let raw = format!("{user}:{pass}");
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        )
    }

    fn keys() -> ApiKeys {
        ApiKeys::parse(&format!(
            "app:charges:write+attempts:read:{}\n# a comment\nana:finance:read+finance:write:{}",
            hash_hex("app-secret"),
            hash_hex("ana-secret")
        ))
        .unwrap()
    }

    #[test]
    fn bearer_and_basic_name_the_key_by_the_means_allowed() {
        let keys = keys();
        let app = keys
            .authenticate(&headers("Bearer app-secret"), Via::Bearer)
            .unwrap();
        assert_eq!(app.name, "app");
        assert!(app.scopes.has(Scope::ChargesWrite) && !app.scopes.has(Scope::FinanceRead));
        let ana = keys
            .authenticate(&headers(&basic("ana", "ana-secret")), Via::Basic)
            .unwrap();
        assert_eq!(ana.name, "ana");
        let denied = |h: &str, via| keys.authenticate(&headers(h), via).unwrap_err();
        assert_eq!(denied("Bearer nope", Via::Bearer), Denied::BadCredential);
        assert_eq!(
            denied(&basic("app", "ana-secret"), Via::Basic),
            Denied::BadCredential,
            "another key's secret under this name"
        );
        assert_eq!(
            denied(&basic("ana", "ana-secret"), Via::Bearer),
            Denied::WrongScheme
        );
        assert_eq!(denied("Bearer ana-secret", Via::Basic), Denied::WrongScheme);
        assert_eq!(denied("Digest x", Via::Either), Denied::WrongScheme);
        assert_eq!(
            keys.authenticate(&HeaderMap::new(), Via::Either)
                .unwrap_err(),
            Denied::NoCredential
        );
    }

    #[test]
    fn generated_secrets_authenticate_and_only_their_hash_is_configured() {
        let (secret, entry) =
            generate("agent", parse_scopes("finance:read,attempts:read").unwrap()).unwrap();
        assert!(secret.starts_with(SECRET_PREFIX) && secret.len() > 40);
        assert!(!entry.contains(&secret));
        assert!(
            entry.starts_with("agent:attempts:read+finance:read:"),
            "{entry}"
        );
        let keys = ApiKeys::parse(&entry).unwrap();
        let caller = keys
            .authenticate(&headers(&format!("Bearer {secret}")), Via::Bearer)
            .unwrap();
        assert_eq!(caller.name, "agent");
        assert!(!caller.scopes.has(Scope::FinanceWrite));
    }

    #[test]
    fn only_same_origin_browser_posts_pass() {
        let h = |pairs: &[(&'static str, &str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.insert(*k, v.parse().unwrap());
            }
            same_origin(&m)
        };
        assert!(
            h(&[("host", "cobro.example:8080")]).is_ok(),
            "not a browser"
        );
        assert!(
            h(&[
                ("host", "a:1"),
                ("origin", "http://a:1"),
                ("sec-fetch-site", "same-origin")
            ])
            .is_ok()
        );
        assert!(h(&[("host", "a:1"), ("origin", "https://evil.example")]).is_err());
        assert!(h(&[("host", "a:1"), ("origin", "null")]).is_err());
        assert!(h(&[("host", "a:1"), ("sec-fetch-site", "cross-site")]).is_err());
        assert!(h(&[("host", "a:1"), ("sec-fetch-site", "same-site")]).is_err());
    }

    #[test]
    fn form_tokens_are_per_key() {
        let keys = keys();
        let ana = keys
            .authenticate(&headers(&basic("ana", "ana-secret")), Via::Basic)
            .unwrap();
        let app = keys
            .authenticate(&headers("Bearer app-secret"), Via::Bearer)
            .unwrap();
        let t = ana.form_token();
        assert_eq!(t.len(), 64);
        assert!(ana.form_token_ok(&t));
        assert!(!app.form_token_ok(&t));
        assert!(!ana.form_token_ok("00"));
        assert!(!format!("{ana:?}").contains(&t));
    }
}
