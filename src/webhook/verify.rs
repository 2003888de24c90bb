//! Webhook signature verification: pure, no I/O and no clock (the caller
//! passes the current time in).
//!
//! Owns the two signature schemes a gateway adapter may use — Standard
//! Webhooks (`webhook-id` / `webhook-timestamp` / `webhook-signature`) and
//! Stripe (`Stripe-Signature: t=…,v1=…`) — the parsing of signing secrets
//! (several at once, for rotation), and the producing of signed headers for
//! the simulator and tests.
//!
//! Invariants:
//! - verification runs over the raw body bytes, before anything parses them;
//! - signatures are compared only through [`hmac::Mac::verify_slice`]
//!   (constant time); a signature that does not decode or has the wrong
//!   length simply does not match;
//! - a timestamp outside the tolerance, in either direction, is rejected even
//!   when its signature is valid;
//! - secret material is never printed: the `Debug` of [`Secret`] and
//!   [`Verifier`] and every error message carry at most a key length.

use std::fmt::{self, Write as _};
use std::str::FromStr;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;
/// A case-insensitive header lookup.
type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Shortest signing key accepted, in bytes (Standard Webhooks: 24 to 64).
pub const MIN_SECRET_BYTES: usize = 24;
/// Default allowed distance between a webhook's timestamp and now.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);
// Header names as `verify` asks for them (lower case).
pub const HEADER_WEBHOOK_ID: &str = "webhook-id";
pub const HEADER_WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
pub const HEADER_WEBHOOK_SIGNATURE: &str = "webhook-signature";
pub const HEADER_STRIPE_SIGNATURE: &str = "stripe-signature";

const SECRET_PREFIX: &str = "whsec_";

/// Secrets may come with or without base64 padding; signatures may not.
const SECRET_B64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Which signature scheme a gateway adapter uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    StandardWebhooks,
    Stripe,
}

impl fmt::Display for Scheme {
    /// The canonical configuration spelling.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scheme::StandardWebhooks => "standard-webhooks",
            Scheme::Stripe => "stripe",
        })
    }
}

impl FromStr for Scheme {
    type Err = UnknownScheme;

    /// `standard`, `standard-webhooks` or `stripe` (ASCII case-insensitive).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "standard" | "standard-webhooks" => Ok(Scheme::StandardWebhooks),
            "stripe" => Ok(Scheme::Stripe),
            _ => Err(UnknownScheme(s.to_owned())),
        }
    }
}

/// A scheme name that is none of the known ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown webhook signature scheme {0:?} (expected standard, standard-webhooks or stripe)")]
pub struct UnknownScheme(pub String);

/// Why a signing secret (or a list of them) was refused. Never contains the
/// secret itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("webhook secret is empty")]
    Empty,
    #[error("webhook secret must start with `whsec_` for Standard Webhooks")]
    MissingPrefix,
    #[error("webhook secret has nothing after the `whsec_` prefix")]
    EmptyAfterPrefix,
    #[error("webhook secret after `whsec_` is not valid base64")]
    InvalidBase64,
    #[error("webhook secret key is {len} bytes, shorter than the minimum {min}")]
    TooShort { len: usize, min: usize },
    #[error("no webhook secrets configured")]
    NoSecrets,
    #[error("webhook secret was parsed for {found}, but the verifier uses {expected}")]
    SchemeMismatch { expected: Scheme, found: Scheme },
    #[error("webhook secret #{position} in the list: {error}")]
    InList {
        /// 1-based position in the list.
        position: usize,
        #[source]
        error: Box<SecretError>,
    },
}

/// One active signing secret, ready to key HMAC-SHA256. Its `Debug` shows
/// the scheme and key length only; there is no `Display`.
#[derive(Clone)]
pub struct Secret {
    scheme: Scheme,
    key_len: usize,
    /// HMAC state keyed with the secret; cloned for every computation.
    mac: HmacSha256,
}

impl Secret {
    /// Standard Webhooks: `whsec_<base64>`, the base64 decoding to the key.
    /// Stripe: the whole string (prefix included) is the key, as UTF-8
    /// bytes. Surrounding whitespace is ignored. Refuses an empty secret, a
    /// Standard secret without `whsec_` or with invalid base64, and a key
    /// shorter than [`MIN_SECRET_BYTES`].
    pub fn parse(scheme: Scheme, raw: &str) -> Result<Secret, SecretError> {
        let raw = raw.trim();
        if raw.is_empty() {
            return Err(SecretError::Empty);
        }
        let key = match scheme {
            Scheme::StandardWebhooks => match raw.strip_prefix(SECRET_PREFIX) {
                None => return Err(SecretError::MissingPrefix),
                Some("") => return Err(SecretError::EmptyAfterPrefix),
                Some(b64) => SECRET_B64
                    .decode(b64)
                    .map_err(|_| SecretError::InvalidBase64)?,
            },
            Scheme::Stripe => raw.as_bytes().to_vec(),
        };
        let too_short = SecretError::TooShort {
            len: key.len(),
            min: MIN_SECRET_BYTES,
        };
        if key.len() < MIN_SECRET_BYTES {
            return Err(too_short);
        }
        // HMAC takes keys of any length: this error cannot happen, yet it is
        // handled rather than unwrapped.
        let mac = HmacSha256::new_from_slice(&key).map_err(|_| too_short)?;
        Ok(Secret {
            scheme,
            key_len: key.len(),
            mac,
        })
    }

    /// The scheme this secret was parsed for.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// Length of the HMAC key in bytes.
    pub fn key_len(&self) -> usize {
        self.key_len
    }

    /// HMAC over `{msg_id}.{timestamp}.{body}` (Standard Webhooks) or
    /// `{timestamp}.{body}` (Stripe, `msg_id` = `None`), not yet finalised.
    fn mac_over(&self, msg_id: Option<&str>, timestamp: i64, body: &[u8]) -> HmacSha256 {
        let mut mac = self.mac.clone();
        if let Some(id) = msg_id {
            mac.update(id.as_bytes());
            mac.update(b".");
        }
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secret")
            .field("scheme", &self.scheme)
            .field("key_len", &self.key_len)
            .finish_non_exhaustive()
    }
}

/// Verifies (and, for the simulator, produces) webhook signatures with one
/// scheme and one or more active secrets.
#[derive(Debug, Clone)]
pub struct Verifier {
    scheme: Scheme,
    secrets: Vec<Secret>,
    tolerance: Duration,
}

/// What a successful verification established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// `webhook-id` for Standard Webhooks (the idempotency key of the
    /// delivery); `None` for Stripe.
    pub msg_id: Option<String>,
    /// The signed timestamp, Unix seconds.
    pub timestamp: i64,
}

/// Why a webhook was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error("missing header {0}")]
    MissingHeader(&'static str),
    #[error("malformed header {0}")]
    MalformedHeader(&'static str),
    #[error("webhook timestamp is {age_secs} s old, beyond the tolerance")]
    TimestampTooOld { age_secs: i64 },
    #[error("webhook timestamp is {ahead_secs} s in the future, beyond the tolerance")]
    TimestampInFuture { ahead_secs: i64 },
    #[error("no valid signature for any active secret")]
    NoValidSignature,
}

impl Rejection {
    /// A short stable code for logs and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Rejection::MissingHeader(_) => "missing_header",
            Rejection::MalformedHeader(_) => "malformed_header",
            Rejection::TimestampTooOld { .. } => "timestamp_too_old",
            Rejection::TimestampInFuture { .. } => "timestamp_in_future",
            Rejection::NoValidSignature => "bad_signature",
        }
    }
}

/// The parsed signature headers of one delivery.
struct Signed {
    msg_id: Option<String>,
    timestamp: i64,
    /// Decoded `v1` signatures; empty or undecodable entries are dropped.
    candidates: Vec<Vec<u8>>,
}

impl Verifier {
    /// Several active secrets (rotation), all parsed for `scheme`. Refuses an
    /// empty list. Tolerance defaults to [`DEFAULT_TOLERANCE`].
    pub fn new(scheme: Scheme, secrets: Vec<Secret>) -> Result<Self, SecretError> {
        if secrets.is_empty() {
            return Err(SecretError::NoSecrets);
        }
        if let Some(other) = secrets.iter().find(|s| s.scheme != scheme) {
            return Err(SecretError::SchemeMismatch {
                expected: scheme,
                found: other.scheme,
            });
        }
        Ok(Verifier {
            scheme,
            secrets,
            tolerance: DEFAULT_TOLERANCE,
        })
    }

    /// From a comma- and/or whitespace-separated list of secrets (the
    /// environment variable format, e.g. `COBRO_WEBHOOK_SECRETS`). The first
    /// one is the current secret, used by [`Verifier::sign`].
    pub fn from_env_value(scheme: Scheme, list: &str) -> Result<Self, SecretError> {
        let secrets = list
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
            .enumerate()
            .map(|(i, raw)| {
                Secret::parse(scheme, raw).map_err(|error| SecretError::InList {
                    position: i + 1,
                    error: Box::new(error),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::new(scheme, secrets)
    }

    /// Allowed distance between the signed timestamp and now, both ways
    /// (whole seconds; exactly the tolerance passes).
    pub fn with_tolerance(self, t: Duration) -> Self {
        Verifier {
            tolerance: t,
            ..self
        }
    }

    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// Verify `body` (the raw bytes, before any parsing). `headers` looks a
    /// header up by name, case-insensitively (it is asked for lowercase
    /// names). Accepts when any `v1` signature matches any active secret and
    /// the timestamp is within the tolerance of `now`.
    pub fn verify(
        &self,
        headers: &dyn Fn(&str) -> Option<String>,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> Result<Verified, Rejection> {
        let signed = match self.scheme {
            Scheme::StandardWebhooks => parse_standard(headers)?,
            Scheme::Stripe => parse_stripe(headers)?,
        };
        // Signature first, so a timestamp rejection always means an
        // authentic but stale (or early) delivery, never a forgery.
        if !self.any_signature_matches(&signed, body) {
            return Err(Rejection::NoValidSignature);
        }
        self.check_timestamp(signed.timestamp, now)?;
        Ok(Verified {
            msg_id: signed.msg_id,
            timestamp: signed.timestamp,
        })
    }

    /// The headers a sender would send, signed with the first (current)
    /// secret. Standard Webhooks: `webhook-id`, `webhook-timestamp`,
    /// `webhook-signature: v1,<base64>`. Stripe: `Stripe-Signature:
    /// t=<ts>,v1=<hex>` (`msg_id` is not part of Stripe's scheme).
    pub fn sign(&self, msg_id: &str, timestamp: i64, body: &[u8]) -> Vec<(String, String)> {
        // `new` refuses an empty list, so there is always a first secret.
        let Some(secret) = self.secrets.first() else {
            return Vec::new();
        };
        let standard = self.scheme == Scheme::StandardWebhooks;
        let signed_id = standard.then_some(msg_id);
        let tag = secret
            .mac_over(signed_id, timestamp, body)
            .finalize()
            .into_bytes();
        if standard {
            vec![
                (HEADER_WEBHOOK_ID.to_owned(), msg_id.to_owned()),
                (HEADER_WEBHOOK_TIMESTAMP.to_owned(), timestamp.to_string()),
                (
                    HEADER_WEBHOOK_SIGNATURE.to_owned(),
                    format!("v1,{}", B64.encode(tag)),
                ),
            ]
        } else {
            let value = format!("t={timestamp},v1={}", encode_hex(&tag));
            vec![("Stripe-Signature".to_owned(), value)]
        }
    }

    fn any_signature_matches(&self, signed: &Signed, body: &[u8]) -> bool {
        if signed.candidates.is_empty() {
            return false;
        }
        self.secrets.iter().any(|secret| {
            // One pass over the body per secret; each candidate only costs
            // the finalisation of a clone.
            let mac = secret.mac_over(signed.msg_id.as_deref(), signed.timestamp, body);
            signed
                .candidates
                .iter()
                .any(|candidate| mac.clone().verify_slice(candidate).is_ok())
        })
    }

    fn check_timestamp(&self, timestamp: i64, now: DateTime<Utc>) -> Result<(), Rejection> {
        let tolerance = i64::try_from(self.tolerance.as_secs()).unwrap_or(i64::MAX);
        let now = now.timestamp();
        let age = now.saturating_sub(timestamp);
        if age > tolerance {
            return Err(Rejection::TimestampTooOld { age_secs: age });
        }
        let ahead = timestamp.saturating_sub(now);
        if ahead > tolerance {
            return Err(Rejection::TimestampInFuture { ahead_secs: ahead });
        }
        Ok(())
    }
}

/// A present, non-blank header value, trimmed.
fn required(headers: Lookup<'_>, name: &'static str) -> Result<String, Rejection> {
    match headers(name) {
        Some(value) if !value.trim().is_empty() => Ok(value.trim().to_owned()),
        _ => Err(Rejection::MissingHeader(name)),
    }
}

fn parse_standard(headers: Lookup<'_>) -> Result<Signed, Rejection> {
    let msg_id = required(headers, HEADER_WEBHOOK_ID)?;
    let timestamp = parse_timestamp(&required(headers, HEADER_WEBHOOK_TIMESTAMP)?)
        .ok_or(Rejection::MalformedHeader(HEADER_WEBHOOK_TIMESTAMP))?;
    let signatures = required(headers, HEADER_WEBHOOK_SIGNATURE)?;
    let candidates = signatures
        .split_ascii_whitespace()
        .filter_map(|entry| match entry.split_once(',') {
            Some(("v1", sig)) if !sig.is_empty() => B64.decode(sig).ok(),
            _ => None,
        })
        .collect();
    Ok(Signed {
        msg_id: Some(msg_id),
        timestamp,
        candidates,
    })
}

fn parse_stripe(headers: Lookup<'_>) -> Result<Signed, Rejection> {
    const MALFORMED: Rejection = Rejection::MalformedHeader(HEADER_STRIPE_SIGNATURE);
    let header = required(headers, HEADER_STRIPE_SIGNATURE)?;
    let mut timestamp = None;
    let mut candidates = Vec::new();
    for (key, value) in header.split(',').filter_map(|item| item.split_once('=')) {
        match key.trim() {
            "t" if timestamp.is_some() => return Err(MALFORMED),
            "t" => timestamp = Some(parse_timestamp(value).ok_or(MALFORMED)?),
            "v1" => candidates.extend(decode_hex(value.trim())),
            _ => {}
        }
    }
    Ok(Signed {
        msg_id: None,
        timestamp: timestamp.ok_or(MALFORMED)?,
        candidates,
    })
}

/// Unix seconds: ASCII digits only (no sign, no fraction), fitting in i64.
fn parse_timestamp(raw: &str) -> Option<i64> {
    let raw = raw.trim();
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    raw.parse().ok()
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if s.is_empty() || !s.len().is_multiple_of(2) {
        return None;
    }
    let nibble = |c: u8| {
        char::from(c)
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
    };
    s.as_bytes()
        .chunks_exact(2)
        .map(|pair| Some((nibble(pair[0])? << 4) | nibble(pair[1])?))
        .collect()
}

fn encode_hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::with_capacity(64), |mut out, b| {
        let _ = write!(out, "{b:02x}"); // writing to a String cannot fail
        out
    })
}

#[cfg(test)]
#[path = "verify_tests.rs"]
mod tests;
