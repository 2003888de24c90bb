//! API keys: named, with scopes, configured as SHA-256 hashes of their
//! secrets (`COBRO_API_KEYS=name:scope+scope:<sha256 hex>,…` or a file in
//! the same format, `COBRO_API_KEYS_FILE`), and made by `cobro api-key`.
//!
//! Invariant: the process never holds a plaintext secret; a presented
//! secret is hashed and compared with every configured hash in constant
//! time; no error, log or `Debug` shows a secret or a hash; a malformed
//! entry is refused whole, at start-up.

use std::fmt;

use base64::Engine;
use clap::Args;
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
pub(super) struct Key {
    pub(super) name: String,
    pub(super) scopes: Scopes,
    pub(super) hash: [u8; 32],
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

pub(super) fn hex(bytes: &[u8]) -> String {
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
                     (`cobro api-key --name NAME --scopes SCOPES` prints it); never the secret itself"
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
    pub(super) fn by_secret(&self, secret: &str) -> Option<&Key> {
        let presented: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
        let mut found = None;
        for k in &self.0 {
            if same(&k.hash, &presented) {
                found = Some(k);
            }
        }
        found
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
pub(super) fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Where the keys come from: `COBRO_API_KEYS` and/or `COBRO_API_KEYS_FILE`.
#[derive(Clone, Default, Args)]
pub struct ApiKeyArgs {
    /// API keys as `name:scope+scope:<sha256 hex of the secret>`, separated
    /// by commas or newlines (`cobro api-key --name NAME --scopes SCOPES` makes one). Unset: every
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
        let shown = format!(
            "{:?}",
            ApiKeys::parse(&format!("app:charges:write:{}", hash_hex("app-secret"))).unwrap()
        );
        assert!(
            shown.contains("app") && !shown.contains(&hash_hex("app-secret")),
            "{shown}"
        );
    }
}
