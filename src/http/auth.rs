//! Who may call the web process: named API keys with scopes, from
//! configuration, stored as SHA-256 hashes of their secrets
//! (`COBRO_API_KEYS=name:scope+scope:<sha256 hex>,…` or a file in the same
//! format), presented as `Authorization: Bearer <secret>` (programs) or as
//! HTTP Basic `name:secret` (a person's browser, finance pages only).
//!
//! Invariant: the process never holds a plaintext secret; a presented
//! secret is hashed and compared with every configured hash in constant
//! time; nothing here logs or `Debug`-prints a secret or a hash. A request
//! without a valid credential is 401, one whose key lacks the route's scope
//! is 403, and only then does the handler run, with the key's name (the
//! actor in the transition log) in its extensions.

use std::fmt;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::MethodRouter;
use base64::Engine;
use clap::Args;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// What a key may do. A route names the one scope it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `POST /charges`.
    ChargesWrite,
    /// `POST /refunds`.
    RefundsWrite,
    /// `GET /charges/{id}`, `GET /refunds/{id}`.
    AttemptsRead,
    /// The finance queue, items, summary and CSV (page and API).
    FinanceRead,
    /// Finance resolutions, case closing, manual business retries.
    FinanceWrite,
    /// `GET /metrics` (web and worker).
    MetricsRead,
}

impl Scope {
    pub const ALL: [Scope; 6] = [
        Scope::ChargesWrite,
        Scope::RefundsWrite,
        Scope::AttemptsRead,
        Scope::FinanceRead,
        Scope::FinanceWrite,
        Scope::MetricsRead,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::ChargesWrite => "charges:write",
            Scope::RefundsWrite => "refunds:write",
            Scope::AttemptsRead => "attempts:read",
            Scope::FinanceRead => "finance:read",
            Scope::FinanceWrite => "finance:write",
            Scope::MetricsRead => "metrics:read",
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }

    pub fn parse(s: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|sc| sc.as_str() == s)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of scopes.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct Scopes(u8);

impl Scopes {
    pub fn of(scopes: &[Scope]) -> Scopes {
        Scopes(scopes.iter().fold(0, |acc, s| acc | s.bit()))
    }

    pub fn has(self, scope: Scope) -> bool {
        self.0 & scope.bit() != 0
    }

    pub fn iter(self) -> impl Iterator<Item = Scope> {
        Scope::ALL.into_iter().filter(move |s| self.has(*s))
    }
}

impl fmt::Debug for Scopes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.iter().map(Scope::as_str))
            .finish()
    }
}

impl fmt::Display for Scopes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.iter().map(Scope::as_str).collect();
        f.write_str(&names.join("+"))
    }
}

/// One configured key: a name, its scopes and the hash of its secret.
#[derive(Clone)]
struct Key {
    name: String,
    scopes: Scopes,
    hash: [u8; 32],
}

/// The configured keys. Empty: every guarded route answers 401.
#[derive(Clone, Default)]
pub struct ApiKeys(Vec<Key>);

impl fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for k in &self.0 {
            m.entry(&k.name, &k.scopes);
        }
        m.finish()
    }
}

/// The prefix of every generated secret (so a leaked one is recognisable
/// by secret scanners).
pub const SECRET_PREFIX: &str = "cobro_sk_";

/// SHA-256 of a secret, as the 64 lowercase hex digits configuration holds.
pub fn hash_hex(secret: &str) -> String {
    hex(&Sha256::digest(secret.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A new random secret (256 bits) and its configuration entry for `name`
/// with `scopes`.
pub fn generate(name: &str, scopes: Scopes) -> Result<(String, String), String> {
    check_name(name)?;
    if scopes == Scopes::default() {
        return Err("give at least one scope".into());
    }
    let bytes: [u8; 32] = rand::random();
    let secret = format!(
        "{SECRET_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    );
    let entry = format!("{name}:{scopes}:{}", hash_hex(&secret));
    Ok((secret, entry))
}

fn check_name(name: &str) -> Result<(), String> {
    let ok = (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "key name {name:?}: 1-64 of letters, digits, '.', '_', '-'"
        ))
    }
}

/// Parses a list of scopes separated by `+` or `,`.
pub fn parse_scopes(raw: &str) -> Result<Scopes, String> {
    let mut scopes = Vec::new();
    for s in raw
        .split(['+', ','])
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let Some(scope) = Scope::parse(s) else {
            let known: Vec<&str> = Scope::ALL.iter().map(|s| s.as_str()).collect();
            return Err(format!("unknown scope {s:?} (known: {})", known.join(", ")));
        };
        scopes.push(scope);
    }
    Ok(Scopes::of(&scopes))
}

impl ApiKeys {
    /// Entries `name:scope+scope:<sha256 hex of the secret>`, separated by
    /// commas or newlines; blank lines and lines starting with `#` are
    /// skipped. Errors never contain a hash.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let mut keys = ApiKeys::default();
        keys.add(raw)?;
        Ok(keys)
    }

    fn add(&mut self, raw: &str) -> Result<(), String> {
        let entries = raw
            .split(['\n', ','])
            .map(str::trim)
            .filter(|e| !e.is_empty() && !e.starts_with('#'));
        for (i, entry) in entries.enumerate() {
            let n = i + 1;
            let (Some((name, rest)), Some((_, hash))) =
                (entry.split_once(':'), entry.rsplit_once(':'))
            else {
                return Err(format!("entry {n} must be name:scopes:sha256-hex"));
            };
            check_name(name).map_err(|e| format!("entry {n}: {e}"))?;
            let scopes = rest
                .strip_suffix(hash)
                .and_then(|s| s.strip_suffix(':'))
                .ok_or_else(|| format!("key {name}: must be name:scopes:sha256-hex"))?;
            let scopes = parse_scopes(scopes).map_err(|e| format!("key {name}: {e}"))?;
            if scopes == Scopes::default() {
                return Err(format!("key {name}: no scopes"));
            }
            let hash = parse_hash(hash).ok_or_else(|| {
                format!(
                    "key {name}: the last field must be the 64 hex digits of the secret's SHA-256 \
                     (`cobro api-key new` prints it); never the secret itself"
                )
            })?;
            if self.0.iter().any(|k| k.name == name) {
                return Err(format!("key {name} is listed twice"));
            }
            if self.0.iter().any(|k| k.hash == hash) {
                return Err(format!("key {name} has the same secret as another key"));
            }
            self.0.push(Key {
                name: name.to_owned(),
                scopes,
                hash,
            });
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The key a bearer secret belongs to. Every configured hash is
    /// compared, in constant time, whether or not one matched earlier.
    fn by_secret(&self, secret: &str) -> Option<&Key> {
        let presented: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
        let mut found = None;
        for k in &self.0 {
            if same(&k.hash, &presented) {
                found = Some(k);
            }
        }
        found
    }

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

fn parse_hash(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Constant-time equality of two digests.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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

/// Where the keys come from: `COBRO_API_KEYS` and/or `COBRO_API_KEYS_FILE`.
#[derive(Clone, Default, Args)]
pub struct ApiKeyArgs {
    /// API keys as `name:scope+scope:<sha256 hex of the secret>`, separated
    /// by commas or newlines (`cobro api-key new` makes one). Unset: every
    /// route but the webhook receiver and /health answers 401.
    #[arg(
        long,
        env = "COBRO_API_KEYS",
        default_value = "",
        hide_env_values = true,
        hide_default_value = true
    )]
    pub api_keys: String,
    /// A file of keys in the same format, one per line (`#` comments).
    #[arg(long, env = "COBRO_API_KEYS_FILE")]
    pub api_keys_file: Option<std::path::PathBuf>,
}

impl fmt::Debug for ApiKeyArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKeyArgs")
            .field("api_keys", &"<redacted>")
            .field("api_keys_file", &self.api_keys_file)
            .finish()
    }
}

impl ApiKeyArgs {
    pub fn keys(&self) -> Result<ApiKeys, String> {
        let mut keys =
            ApiKeys::parse(&self.api_keys).map_err(|e| format!("COBRO_API_KEYS: {e}"))?;
        if let Some(path) = &self.api_keys_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("COBRO_API_KEYS_FILE {}: {e}", path.display()))?;
            keys.add(&text)
                .map_err(|e| format!("COBRO_API_KEYS_FILE {}: {e}", path.display()))?;
        }
        Ok(keys)
    }
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
    fn bad_configuration_is_refused_without_showing_hashes() {
        let h = hash_hex("s");
        for raw in [
            "app".to_owned(),
            format!("app:{h}"),
            format!("app:charges:write:{}", "ab".repeat(31)),
            "app:charges:write:the-plain-secret-itself".to_owned(),
            format!("app:charges:rule:{h}"),
            format!("a b:charges:write:{h}"),
            format!("app:charges:write:{h},app:attempts:read:{}", hash_hex("t")),
            format!("app:charges:write:{h},web:attempts:read:{h}"),
        ] {
            let err = ApiKeys::parse(&raw).unwrap_err();
            assert!(
                !err.contains(&h) && !err.contains("plain-secret"),
                "{raw}: {err}"
            );
        }
        assert!(ApiKeys::parse("").unwrap().is_empty());
        let shown = format!("{:?}", keys());
        assert!(
            shown.contains("app") && !shown.contains(&hash_hex("app-secret")),
            "{shown}"
        );
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
