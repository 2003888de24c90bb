//! Who may use the finance routes: named users with secrets from
//! configuration (`COBRO_FINANCE_USERS=ana:<secret>,luis:<secret>`), by HTTP
//! Basic auth (the browser's login prompt, `curl -u`) or `Authorization:
//! Bearer <secret>` (scripts). The name is what the transition log records.
//!
//! Invariant: a request without valid credentials gets 401 and nothing
//! else; secrets are compared in constant time and never appear in logs,
//! errors or `Debug`. HTML forms also carry a per-user token derived from
//! the secret (HMAC), so another site cannot make a logged-in browser
//! resolve anything (the browser re-sends Basic credentials by itself).

use axum::http::HeaderMap;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The configured finance users.
#[derive(Clone, Default)]
pub struct Users(Vec<User>);

#[derive(Clone)]
struct User {
    name: String,
    secret: String,
}

impl std::fmt::Debug for Users {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.0.iter().map(|u| u.name.as_str()).collect();
        f.debug_struct("Users")
            .field("names", &names)
            .finish_non_exhaustive()
    }
}

/// The shortest secret accepted.
pub const MIN_SECRET_LEN: usize = 16;

impl Users {
    /// `name:secret[,name:secret…]`; empty means no finance access at all.
    /// Errors never contain a secret.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let mut users = Vec::new();
        for (i, entry) in raw.split(',').map(str::trim).enumerate() {
            if entry.is_empty() {
                continue;
            }
            let Some((name, secret)) = entry.split_once(':') else {
                return Err(format!("entry {} must be name:secret", i + 1));
            };
            let name_ok = (1..=64).contains(&name.len())
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
            if !name_ok {
                return Err(format!(
                    "entry {}: the name must be 1-64 of letters, digits, . _ -",
                    i + 1
                ));
            }
            if secret.len() < MIN_SECRET_LEN || secret.chars().any(|c| c.is_control()) {
                return Err(format!(
                    "user {name}: the secret must be at least {MIN_SECRET_LEN} printable characters"
                ));
            }
            if users.iter().any(|u: &User| u.name == name) {
                return Err(format!("user {name} is listed twice"));
            }
            users.push(User {
                name: name.to_owned(),
                secret: secret.to_owned(),
            });
        }
        Ok(Self(users))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The user these headers authenticate, if any.
    pub fn authenticate(&self, headers: &HeaderMap) -> Option<&str> {
        let value = headers.get("authorization")?.to_str().ok()?;
        let (scheme, rest) = value.split_once(' ')?;
        let rest = rest.trim();
        let found = if scheme.eq_ignore_ascii_case("basic") {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(rest)
                .ok()?;
            let text = String::from_utf8(decoded).ok()?;
            let (name, secret) = text.split_once(':')?;
            self.0
                .iter()
                .find(|u| same(&u.name, name) & same(&u.secret, secret))
        } else if scheme.eq_ignore_ascii_case("bearer") {
            self.0.iter().find(|u| same(&u.secret, rest))
        } else {
            None
        };
        found.map(|u| u.name.as_str())
    }

    /// The form token of `name` (hex HMAC-SHA256 of the name under its secret).
    pub fn form_token(&self, name: &str) -> Option<String> {
        let user = self.0.iter().find(|u| u.name == name)?;
        let mut mac = Hmac::<Sha256>::new_from_slice(user.secret.as_bytes()).ok()?;
        mac.update(b"cobro-finance-form:");
        mac.update(name.as_bytes());
        let bytes = mac.finalize().into_bytes();
        Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }

    pub fn form_token_ok(&self, name: &str, token: &str) -> bool {
        self.form_token(name).is_some_and(|t| same(&t, token))
    }
}

/// Constant-time equality (over SHA-256 digests, so lengths do not leak).
fn same(a: &str, b: &str) -> bool {
    let (da, db) = (Sha256::digest(a.as_bytes()), Sha256::digest(b.as_bytes()));
    da.iter()
        .zip(db.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
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

    #[test]
    fn basic_and_bearer_name_the_user() {
        let users = Users::parse("ana:ana-secret-123456, luis:luis-secret-123456").unwrap();
        assert_eq!(
            users.authenticate(&headers(&basic("ana", "ana-secret-123456"))),
            Some("ana")
        );
        assert_eq!(
            users.authenticate(&headers("Bearer luis-secret-123456")),
            Some("luis")
        );
        assert_eq!(
            users.authenticate(&headers(&basic("ana", "luis-secret-123456"))),
            None
        );
        assert_eq!(users.authenticate(&headers("Bearer nope")), None);
        assert_eq!(users.authenticate(&HeaderMap::new()), None);
        assert_eq!(users.authenticate(&headers("Digest x")), None);
    }

    #[test]
    fn bad_configuration_is_refused_without_showing_secrets() {
        for raw in [
            "ana",
            "ana:short",
            "a b:long-enough-secret!!",
            "ana:long-enough-secret,ana:long-enough-secret",
        ] {
            let err = Users::parse(raw).unwrap_err();
            assert!(
                !err.contains("long-enough-secret") && !err.contains("short"),
                "{err}"
            );
        }
        assert!(Users::parse("").unwrap().is_empty());
        let users = Users::parse("ana:ana-secret-123456").unwrap();
        assert!(!format!("{users:?}").contains("ana-secret"));
    }

    #[test]
    fn form_tokens_are_per_user() {
        let users = Users::parse("ana:ana-secret-123456,luis:luis-secret-123456").unwrap();
        let t = users.form_token("ana").unwrap();
        assert!(users.form_token_ok("ana", &t));
        assert!(!users.form_token_ok("luis", &t));
        assert!(!users.form_token_ok("ana", "00"));
    }
}
