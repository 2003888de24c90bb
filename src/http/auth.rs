//! Who is calling: a request's `Authorization` matched against the API keys
//! ([`super::keys`]): `Bearer <secret>` (programs) or HTTP Basic
//! `name:secret` (a person's browser, finance pages only); the route's
//! [`Guard`] (scope and accepted means); the finance forms' token and the
//! same-origin check.
//!
//! A form token is bound to a sign-in and expires: Basic has no session, so
//! the first page a browser sees gets a random sign-in nonce in a cookie
//! ([`SIGN_IN_COOKIE`]: `HttpOnly; SameSite=Lax`, `Secure` behind an
//! HTTPS proxy). Lax, not Strict: a link followed from another site (an
//! email, a chat) must carry the cookie, or that page would start a new
//! sign-in and void the forms open in the person's other tabs; another
//! site's POST, its frames and its subresources still carry none. A token is `<issued at>.<HMAC-SHA256 over the key's name,
//! the nonce and the issue time, keyed by the key's stored hash>`: another
//! site cannot make one, a token shown to another browser (or before the
//! cookie changed) does not match, and one older than the TTL is refused.
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
            sign_in: sign_in_cookie(headers).unwrap_or_default(),
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

/// The cookie naming a browser's sign-in (a random nonce the form tokens
/// are bound to).
pub const SIGN_IN_COOKIE: &str = "cobro_signin";

/// The sign-in nonce the request's cookies carry, when well-formed.
fn sign_in_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().strip_prefix(SIGN_IN_COOKIE)?.strip_prefix('='))
        .find(|v| v.len() == 32 && v.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(str::to_owned)
}

/// The `Set-Cookie` of a new sign-in nonce: `Secure` when the request
/// reached us through an HTTPS proxy (`X-Forwarded-Proto: https`; cobro
/// itself speaks plain HTTP, where a `Secure` cookie would never be sent
/// back and no form would work).
fn new_sign_in(headers: &HeaderMap) -> (String, HeaderValue) {
    let nonce = hex(&rand::random::<[u8; 16]>());
    let https = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|p| p.trim().eq_ignore_ascii_case("https"));
    let secure = if https { "; Secure" } else { "" };
    let cookie = format!("{SIGN_IN_COOKIE}={nonce}; Path=/; HttpOnly; SameSite=Lax{secure}");
    let value = HeaderValue::from_str(&cookie).unwrap_or(HeaderValue::from_static(""));
    (nonce, value)
}

/// Why a form's token was refused (the form changes nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FormRefusal {
    #[error("This form has expired: it was shown too long ago")]
    Expired,
    #[error(
        "This form was not made for this sign-in (it came from another site, another browser or an earlier sign-in)"
    )]
    Foreign,
}

/// A token issued this far ahead of our clock is not ours.
const FORM_CLOCK_SKEW_SECS: i64 = 60;

/// The authenticated caller, put in the request's extensions.
#[derive(Clone)]
pub struct Caller {
    pub name: String,
    pub scopes: Scopes,
    /// Keys the form tokens (the stored hash: server-side, never sent).
    form_key: [u8; 32],
    /// The browser's sign-in nonce ([`SIGN_IN_COOKIE`]); empty for a
    /// program (Bearer).
    sign_in: String,
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

    /// The token the finance page puts in its forms for this caller's
    /// sign-in, issued now.
    pub fn form_token(&self) -> String {
        self.form_token_at(chrono::Utc::now().timestamp())
    }

    /// The form token issued at `issued` (seconds since the epoch).
    pub fn form_token_at(&self, issued: i64) -> String {
        format!("{issued}.{}", self.form_mac(issued))
    }

    fn form_mac(&self, issued: i64) -> String {
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.form_key) else {
            return String::new();
        };
        mac.update(b"cobro-finance-form\0");
        mac.update(self.name.as_bytes());
        mac.update(b"\0");
        mac.update(self.sign_in.as_bytes());
        mac.update(b"\0");
        mac.update(issued.to_string().as_bytes());
        hex(&mac.finalize().into_bytes())
    }

    /// Whether `token` is this sign-in's and younger than `ttl`, now.
    pub fn check_form_token(
        &self,
        token: &str,
        ttl: std::time::Duration,
    ) -> Result<(), FormRefusal> {
        self.check_form_token_at(token, ttl, chrono::Utc::now().timestamp())
    }

    /// Whether `token` is this sign-in's and younger than `ttl` at `now`:
    /// authenticity first (a forged token is [`FormRefusal::Foreign`]
    /// whatever its time), then age.
    pub fn check_form_token_at(
        &self,
        token: &str,
        ttl: std::time::Duration,
        now: i64,
    ) -> Result<(), FormRefusal> {
        let (issued, _) = token.split_once('.').ok_or(FormRefusal::Foreign)?;
        let issued: i64 = issued.parse().map_err(|_| FormRefusal::Foreign)?;
        let (a, b) = (
            Sha256::digest(self.form_token_at(issued).as_bytes()),
            Sha256::digest(token.as_bytes()),
        );
        if self.sign_in.is_empty() || !same(&a.into(), &b.into()) {
            return Err(FormRefusal::Foreign);
        }
        if issued > now + FORM_CLOCK_SKEW_SECS {
            return Err(FormRefusal::Foreign);
        }
        let ttl = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
        if now.saturating_sub(issued) > ttl {
            return Err(FormRefusal::Expired);
        }
        Ok(())
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
    // A browser's first page starts its sign-in: a nonce for the forms.
    // Only a page (GET) seen by Basic does: a post from another site
    // (which carries no SameSite cookie) must not replace the person's
    // sign-in, and a program (Bearer) has no forms.
    let mut caller = caller;
    let mut set_cookie = None;
    let page = req.method() == axum::http::Method::GET;
    let browser = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.len() > 6 && v[..6].eq_ignore_ascii_case("basic "));
    if browser && page && caller.sign_in.is_empty() {
        let (nonce, cookie) = new_sign_in(req.headers());
        caller.sign_in = nonce;
        set_cookie = Some(cookie);
    }
    req.extensions_mut().insert(caller);
    let mut resp = next.run(req).await;
    if let Some(cookie) = set_cookie {
        resp.headers_mut().append(header::SET_COOKIE, cookie);
    }
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
    fn form_tokens_are_per_key_and_sign_in_and_expire() {
        let keys = keys();
        let with_cookie = |nonce: &str| {
            let mut h = headers(&basic("ana", "ana-secret"));
            h.insert(
                header::COOKIE,
                HeaderValue::from_str(&format!("a=b; {SIGN_IN_COOKIE}={nonce}")).unwrap(),
            );
            keys.authenticate(&h, Via::Basic).unwrap()
        };
        let ana = with_cookie(&"a1".repeat(16));
        let ana_elsewhere = with_cookie(&"b2".repeat(16));
        let app = keys
            .authenticate(&headers("Bearer app-secret"), Via::Bearer)
            .unwrap();
        let ttl = std::time::Duration::from_secs(600);
        let t = ana.form_token_at(1_000_000);
        assert_eq!(ana.check_form_token_at(&t, ttl, 1_000_000), Ok(()));
        assert_eq!(ana.check_form_token_at(&t, ttl, 1_000_600), Ok(()));
        assert_eq!(
            ana.check_form_token_at(&t, ttl, 1_000_601),
            Err(FormRefusal::Expired)
        );
        let foreign = Err(FormRefusal::Foreign);
        assert_eq!(
            ana_elsewhere.check_form_token_at(&t, ttl, 1_000_000),
            foreign
        );
        assert_eq!(app.check_form_token_at(&t, ttl, 1_000_000), foreign);
        assert_eq!(ana.check_form_token_at("00", ttl, 1_000_000), foreign);
        // Moving the issue time forward breaks the MAC.
        let (_, mac) = t.split_once('.').unwrap();
        let younger = format!("1000500.{mac}");
        assert_eq!(ana.check_form_token_at(&younger, ttl, 1_000_601), foreign);
        // Issued in the future (beyond the skew): not ours.
        let ahead = ana.form_token_at(1_000_000 + 3_600);
        assert_eq!(ana.check_form_token_at(&ahead, ttl, 1_000_000), foreign);
        assert!(!format!("{ana:?}").contains(mac));
    }
}
