//! Where the gateway is and how it is trusted, checked once at start-up:
//! `GATEWAY_URL` must be an `http://` or `https://` URL with a host, and
//! `COBRO_GATEWAY_CA_FILE` (optional) a PEM file of extra root certificates
//! for an `https://` gateway behind a private CA. Builds the one reqwest
//! client (rustls, the public webpki roots plus those extra roots) that every
//! call of both adapters uses.
//!
//! Invariant: the client never follows a redirect (reqwest's default
//! follows ten, and re-sends a POST's body on a 307/308: a charge to another
//! host); a 3xx comes back to the adapter, which classifies it
//! ([`super::redirect`]). A gateway the client could never talk to is refused here,
//! before a process takes any work, never found out at the first charge
//! (where every attempt would turn `DESCONOCIDO`). Every error names the
//! setting, and none shows a URL's user name or password.

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::Url;

/// Why the gateway client cannot be built from the settings.
#[derive(Debug, thiserror::Error)]
pub enum GatewayConfigError {
    #[error("GATEWAY_URL is not a URL ({0}); expected e.g. https://gateway.example.com")]
    Unparsable(String),
    #[error(
        "GATEWAY_URL must start with http:// or https:// (its scheme is {0:?}); e.g. https://gateway.example.com"
    )]
    Scheme(String),
    #[error("GATEWAY_URL has no host; expected e.g. https://gateway.example.com")]
    NoHost,
    #[error("GATEWAY_URL must not have a query or a fragment: the API's paths are appended to it")]
    QueryOrFragment,
    #[error("COBRO_GATEWAY_CA_FILE {}: {reason}", path.display())]
    CaFile { path: PathBuf, reason: String },
    #[error("{0} is not set; COBRO_GATEWAY=stripe needs it")]
    MissingSecret(&'static str),
    #[error(
        "no gateway configured: set COBRO_GATEWAY=stripe with STRIPE_SECRET_KEY, or COBRO_GATEWAY=sim with GATEWAY_URL (the simulator: `cobro gateway-sim` listens on http://127.0.0.1:8089)"
    )]
    NotChosen,
    #[error(
        "COBRO_GATEWAY=sim needs GATEWAY_URL, the simulator's (or a compatible gateway's) address, e.g. http://127.0.0.1:8089 for `cobro gateway-sim`"
    )]
    NoSimUrl,
    #[error(
        "STRIPE_SECRET_KEY holds a publishable key (pk_…), which cannot charge: use the secret key (sk_live_… or sk_test_…) or a restricted key (rk_live_… or rk_test_…) from Stripe's dashboard, Developers → API keys"
    )]
    PublishableKey,
    #[error(
        "STRIPE_SECRET_KEY does not look like a Stripe secret key: expected sk_live_…, sk_test_…, rk_live_… or rk_test_… (it starts with {0:?})"
    )]
    NotASecretKey(String),
    /// The Stripe API answered 401/403 to the start-up call.
    #[error("{0}")]
    KeyRefused(String),
    #[error("building the gateway's HTTP client: {0}")]
    Client(#[source] reqwest::Error),
}

/// `GATEWAY_URL` checked: http or https, a host, no query or fragment.
/// Returns the base every API path is appended to (no trailing slash).
pub fn parse_base_url(raw: &str) -> Result<String, GatewayConfigError> {
    let trimmed = raw.trim();
    let url = Url::parse(trimmed).map_err(|e| GatewayConfigError::Unparsable(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(GatewayConfigError::Scheme(url.scheme().to_owned()));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(GatewayConfigError::NoHost);
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(GatewayConfigError::QueryOrFragment);
    }
    Ok(trimmed.trim_end_matches('/').to_owned())
}

/// The URL as it may be shown in a log or `Debug`: without user name or
/// password (a gateway URL may carry credentials).
pub fn shown_url(raw: &str) -> String {
    match Url::parse(raw.trim()) {
        Ok(mut url) => {
            if !url.username().is_empty() || url.password().is_some() {
                let _ = url.set_username("");
                let _ = url.set_password(None);
            }
            url.to_string()
        }
        Err(_) => "<not a URL>".to_owned(),
    }
}

/// The client every call goes through: explicit timeouts, no redirects,
/// rustls with the webpki roots, plus the roots in `ca_file`.
pub(in crate::gateway) fn build(
    connect_timeout: Duration,
    request_timeout: Duration,
    ca_file: Option<&Path>,
) -> Result<reqwest::Client, GatewayConfigError> {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .connect_timeout(connect_timeout)
        .timeout(request_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .pool_idle_timeout(Duration::from_secs(30));
    if let Some(path) = ca_file {
        for root in extra_roots(path)? {
            builder = builder.add_root_certificate(root);
        }
    }
    builder.build().map_err(|e| match ca_file {
        // With our settings, only the extra roots can make the build fail.
        Some(path) => GatewayConfigError::CaFile {
            path: path.to_owned(),
            reason: format!("not usable as root certificates ({})", chain(&e)),
        },
        None => GatewayConfigError::Client(e),
    })
}

/// The certificates of a PEM bundle; an unreadable file or one with no
/// certificate is an error, never an empty trust list.
fn extra_roots(path: &Path) -> Result<Vec<reqwest::Certificate>, GatewayConfigError> {
    let fail = |reason: String| GatewayConfigError::CaFile {
        path: path.to_owned(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|e| fail(format!("cannot be read ({e})")))?;
    let roots = reqwest::Certificate::from_pem_bundle(&pem)
        .map_err(|e| fail(format!("is not a PEM bundle ({})", chain(&e))))?;
    if roots.is_empty() {
        return Err(fail(
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    Ok(roots)
}

/// An error and its causes on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_urls_are_http_or_https_with_a_host() {
        for (raw, base) in [
            ("http://127.0.0.1:8089", "http://127.0.0.1:8089"),
            (
                "https://gateway.example.com/",
                "https://gateway.example.com",
            ),
            (
                " https://gw.example.com/api/v2/ ",
                "https://gw.example.com/api/v2",
            ),
            ("HTTPS://GW.example.com", "HTTPS://GW.example.com"),
        ] {
            assert_eq!(parse_base_url(raw).unwrap(), base, "{raw}");
        }
        for (raw, what) in [
            ("ftp://127.0.0.1:8089", "scheme"),
            ("file:///etc/passwd", "scheme"),
            ("localhost:8089", "scheme"),
            ("unix:/run/gw.sock", "scheme"),
            ("127.0.0.1:8089", "not a URL"),
            ("", "not a URL"),
            ("http://", "not a URL"),
            ("gateway.example.com", "not a URL"),
            ("https://gw.example.com/?x=1", "query"),
            ("https://gw.example.com/#top", "query"),
        ] {
            let err = parse_base_url(raw).unwrap_err().to_string();
            assert!(err.starts_with("GATEWAY_URL"), "{raw}: {err}");
            assert!(err.contains(what), "{raw}: {err}");
        }
    }

    #[test]
    fn a_url_is_shown_without_its_credentials() {
        let raw = "ftp://cobro:s3cret-pass@gw.example.com/x";
        let err = parse_base_url(raw).unwrap_err().to_string();
        assert!(!err.contains("s3cret") && !err.contains("cobro:"), "{err}");
        let shown = shown_url("https://cobro:s3cret-pass@gw.example.com/v1");
        assert_eq!(shown, "https://gw.example.com/v1");
        assert_eq!(shown_url("not a url"), "<not a URL>");
    }

    #[test]
    fn a_ca_file_must_hold_certificates() {
        let dir = std::env::temp_dir().join(format!("cobro-ca-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let t = Duration::from_secs(1);
        let missing = dir.join("missing.pem");
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "no certificate here\n").unwrap();
        for (path, what) in [(&missing, "cannot be read"), (&empty, "no PEM certificate")] {
            let err = build(t, t, Some(path)).unwrap_err().to_string();
            assert!(err.starts_with("COBRO_GATEWAY_CA_FILE"), "{err}");
            assert!(err.contains(what), "{err}");
        }
        assert!(build(t, t, None).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
