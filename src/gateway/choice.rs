//! Which gateway API a process speaks (`COBRO_GATEWAY`): cobro's simulator
//! API at `GATEWAY_URL`, or Stripe's at `STRIPE_API_BASE` with
//! `STRIPE_SECRET_KEY`. Checked at start-up, before any work is taken.
//!
//! Invariants: there is no silent default: with neither `COBRO_GATEWAY`
//! nor `GATEWAY_URL` a process that talks to a gateway refuses to start
//! (a `GATEWAY_URL` alone means the simulator's API, as it always has);
//! the secret key appears in no `Debug`, no log and no `--help` output
//! (`hide_env_values`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{ArgAction, Args, ValueEnum};

use super::stripe::{
    DEFAULT_API_BASE, FindConfig, KeyCheck, SecretKey, StripeConfig, StripeGateway,
};
use super::{Gateway, GatewayConfigError, HttpGateway, HttpGatewayConfig, shown_url};

/// How a process reaches the gateway over HTTP: its base URL, extra root
/// certificates and the two timeouts. The worker and `cobro reconcile`
/// take the same settings; `Debug` shows the URL without its credentials.
#[derive(Clone, Args)]
pub struct GatewayLink {
    /// The simulator's (or a compatible gateway's) base URL: `http://…` or
    /// `https://…` (checked at start-up). No default: with neither this
    /// nor `COBRO_GATEWAY` the process refuses to start.
    #[arg(
        long = "gateway-url",
        value_name = "GATEWAY_URL",
        env = "GATEWAY_URL",
        hide_env_values = true
    )]
    pub url: Option<String>,
    /// A PEM file of extra root certificates to trust for an `https://`
    /// gateway (a private CA, a staging gateway); the public roots stay trusted.
    #[arg(
        long = "gateway-ca-file",
        value_name = "GATEWAY_CA_FILE",
        env = "COBRO_GATEWAY_CA_FILE"
    )]
    pub ca_file: Option<PathBuf>,
    /// How long opening a connection to the gateway may take; a connection
    /// not opened in time means the request was not sent (it is sent again
    /// later with the same key).
    #[arg(long = "gateway-connect-timeout", value_name = "GATEWAY_CONNECT_TIMEOUT", env = "COBRO_GATEWAY_CONNECT_TIMEOUT", default_value = "2s", value_parser = crate::backoff::parse_duration_arg)]
    pub connect_timeout: Duration,
    /// How long one request to the gateway may take, connect to answer; a
    /// charge without an answer after this long is DESCONOCIDO.
    #[arg(long = "gateway-timeout", value_name = "GATEWAY_TIMEOUT", env = "COBRO_GATEWAY_TIMEOUT", default_value = "10s", value_parser = crate::backoff::parse_duration_arg)]
    pub timeout: Duration,
}

impl GatewayLink {
    /// The base URL, empty when `GATEWAY_URL` is unset (Stripe's API).
    pub fn url(&self) -> &str {
        self.url.as_deref().unwrap_or_default()
    }

    /// The HTTP client's settings.
    pub fn config(&self) -> HttpGatewayConfig {
        HttpGatewayConfig {
            base_url: self.url().to_owned(),
            connect_timeout: self.connect_timeout,
            request_timeout: self.timeout,
            ca_file: self.ca_file.clone(),
        }
    }
}

impl std::fmt::Debug for GatewayLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayLink")
            .field("url", &self.url.as_deref().map(shown_url))
            .field("ca_file", &self.ca_file)
            .field("connect_timeout", &self.connect_timeout)
            .field("timeout", &self.timeout)
            .finish()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GatewayKind {
    /// cobro's simulator API (`cobro gateway-sim`), at `GATEWAY_URL`.
    Sim,
    /// Stripe's API (or a Stripe-compatible server) at `STRIPE_API_BASE`.
    Stripe,
}

#[derive(Clone, Args)]
pub struct GatewayChoice {
    /// Which gateway API to speak: `sim` (needs GATEWAY_URL) or `stripe`
    /// (needs STRIPE_SECRET_KEY). Unset: `sim` if GATEWAY_URL is set, else
    /// the process refuses to start.
    #[arg(long = "gateway", env = "COBRO_GATEWAY", value_enum)]
    pub kind: Option<GatewayKind>,
    /// Stripe's secret (or restricted) API key; never logged.
    #[arg(long, env = "STRIPE_SECRET_KEY", hide_env_values = true)]
    pub stripe_secret_key: Option<String>,
    /// Stripe's API base URL, or a Stripe-compatible server's.
    #[arg(
        long,
        env = "STRIPE_API_BASE",
        default_value = DEFAULT_API_BASE,
        hide_env_values = true
    )]
    pub stripe_api_base: String,
    /// Confirm business retries as merchant-initiated (`off_session=true`).
    #[arg(long, env = "STRIPE_OFF_SESSION_RETRIES", default_value_t = true, action = ArgAction::Set)]
    pub stripe_off_session_retries: bool,
    /// Send the `created` window to Stripe's list endpoints; false for a
    /// compatible server without that filter (localstripe).
    #[arg(long, env = "STRIPE_CREATED_FILTER", default_value_t = true, action = ArgAction::Set)]
    pub stripe_created_filter: bool,
    /// Find a PaymentIntent whose id was not recorded through Stripe's
    /// search (`/v1/payment_intents/search`) before listing.
    #[arg(long, env = "STRIPE_SEARCH", default_value_t = false, action = ArgAction::Set)]
    pub stripe_search: bool,
    /// How long a new PaymentIntent may stay invisible to Stripe's search:
    /// a search's "not found" within it is not a clearance.
    #[arg(long, env = "STRIPE_SEARCH_LAG", default_value = "60s", value_parser = crate::backoff::parse_duration_arg)]
    pub stripe_search_lag: std::time::Duration,
    /// The most pages (100 PaymentIntents each) a lookup lists; past it the
    /// lookup failed (looked up again, then finance).
    #[arg(long, env = "STRIPE_LOOKUP_PAGES", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub stripe_lookup_pages: u32,
}

impl Default for GatewayChoice {
    /// No API chosen (a `GATEWAY_URL` then means the simulator's), and
    /// Stripe's settings at their defaults.
    fn default() -> Self {
        Self {
            kind: None,
            stripe_secret_key: None,
            stripe_api_base: DEFAULT_API_BASE.into(),
            stripe_off_session_retries: true,
            stripe_created_filter: true,
            stripe_search: false,
            stripe_search_lag: FindConfig::default().search_lag,
            stripe_lookup_pages: FindConfig::default().max_pages as u32,
        }
    }
}

impl std::fmt::Debug for GatewayChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayChoice")
            .field("kind", &self.kind)
            .field(
                "stripe_secret_key",
                &self.stripe_secret_key.as_deref().map(SecretKey::new),
            )
            .field("stripe_api_base", &shown_url(&self.stripe_api_base))
            .finish_non_exhaustive()
    }
}

impl GatewayChoice {
    /// The API this process speaks: `COBRO_GATEWAY`, or the simulator's
    /// when only a `GATEWAY_URL` (`sim_url`) is given; neither is refused
    /// with a message naming both, and so is the simulator without its URL.
    /// Stripe's key must look like a secret or restricted key.
    pub fn resolve(&self, sim_url: Option<&str>) -> Result<GatewayKind, GatewayConfigError> {
        match (self.kind, sim_url.filter(|u| !u.trim().is_empty())) {
            (Some(GatewayKind::Stripe), _) => {
                SecretKey::new(self.stripe_secret_key.as_deref().unwrap_or_default()).check()?;
                Ok(GatewayKind::Stripe)
            }
            (Some(GatewayKind::Sim) | None, Some(_)) => Ok(GatewayKind::Sim),
            (Some(GatewayKind::Sim), None) => Err(GatewayConfigError::NoSimUrl),
            (None, None) => Err(GatewayConfigError::NotChosen),
        }
    }

    /// The adapter, with the timeouts and trust of `http`; `http.base_url`
    /// is the simulator's URL (empty: not given). Refused as
    /// [`GatewayChoice::resolve`] refuses.
    pub fn build(&self, http: HttpGatewayConfig) -> Result<Arc<dyn Gateway>, GatewayConfigError> {
        Ok(match self.resolve(Some(&http.base_url))? {
            GatewayKind::Sim => Arc::new(HttpGateway::new(http)?),
            GatewayKind::Stripe => Arc::new(self.stripe(http)?),
        })
    }

    /// The start-up call of a Stripe worker ([`KeyCheck`]): a 401/403 is
    /// an error naming `STRIPE_SECRET_KEY`; an unreachable API is logged
    /// and let through (attempts wait for it, parked). The simulator's API
    /// has no credentials: nothing to check.
    pub async fn check_credentials(
        &self,
        http: HttpGatewayConfig,
    ) -> Result<(), GatewayConfigError> {
        if self.resolve(Some(&http.base_url))? != GatewayKind::Stripe {
            return Ok(());
        }
        let check = self.stripe(http)?.check_key().await;
        if let Some(refusal) = check.refusal() {
            return Err(GatewayConfigError::KeyRefused(refusal));
        }
        if let KeyCheck::Unreachable(why) = check {
            tracing::warn!(
                api = %shown_url(&self.stripe_api_base),
                why,
                "the Stripe API did not answer the start-up key check; starting anyway (attempts wait, parked, until it answers)"
            );
        }
        Ok(())
    }

    fn stripe(&self, http: HttpGatewayConfig) -> Result<StripeGateway, GatewayConfigError> {
        StripeGateway::new(StripeConfig {
            api_base: self.stripe_api_base.clone(),
            secret_key: SecretKey::new(self.stripe_secret_key.as_deref().unwrap_or_default()),
            connect_timeout: http.connect_timeout,
            request_timeout: http.request_timeout,
            ca_file: http.ca_file,
            off_session_retries: self.stripe_off_session_retries,
            created_filter: self.stripe_created_filter,
            find: FindConfig {
                search: self.stripe_search,
                search_lag: self.stripe_search_lag,
                max_pages: self.stripe_lookup_pages as usize,
            },
        })
    }

    /// The gateway's URL as it may be shown (and names its breaker).
    pub fn shown(&self, sim_url: &str) -> String {
        match self.kind {
            Some(GatewayKind::Stripe) => shown_url(&self.stripe_api_base),
            Some(GatewayKind::Sim) | None => shown_url(sim_url),
        }
    }

    /// Stripe answers "what happened" by PaymentIntent id, strongly
    /// consistent, and a PaymentIntent succeeds at most once: a lookup's
    /// "not confirmed" always allows confirming it again.
    pub fn idempotent_lookups(&self) -> bool {
        self.kind == Some(GatewayKind::Stripe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        g: GatewayChoice,
    }

    #[test]
    fn the_key_is_not_in_debug_and_stripe_needs_one() {
        let cli = Cli::parse_from([
            "x",
            "--gateway",
            "stripe",
            "--stripe-secret-key",
            "sk_test_supersecretvalue",
        ]);
        assert!(!format!("{:?}", cli.g).contains("supersecret"));
        // A key of a shape Stripe does not make (a typo) shows nothing of
        // itself either.
        for odd in [
            "sklive_supersecretvalue",
            "sk-live-supersecretvalue",
            "supersecret",
        ] {
            let cli = Cli::parse_from(["x", "--gateway", "stripe", "--stripe-secret-key", odd]);
            let shown = format!("{:?}", cli.g);
            assert!(
                !shown.contains("supersecret") && shown.contains("redacted"),
                "{shown}"
            );
        }
        let http = HttpGatewayConfig {
            base_url: "http://127.0.0.1:1".into(),
            connect_timeout: std::time::Duration::from_secs(1),
            request_timeout: std::time::Duration::from_secs(1),
            ca_file: None,
        };
        assert!(cli.g.build(http.clone()).is_ok());
        let no_key = Cli::parse_from(["x", "--gateway", "stripe"]);
        assert!(no_key.g.resolve(None).is_err());
        let err = no_key.g.build(http).err().map(|e| e.to_string());
        assert!(
            err.is_some_and(|e| e.contains("STRIPE_SECRET_KEY")),
            "refused at start-up"
        );
    }

    #[test]
    fn lookup_settings_parse_with_their_defaults_and_a_zero_page_cap_is_refused() {
        let d = Cli::parse_from(["x"]).g;
        assert_eq!(
            (d.stripe_search, d.stripe_search_lag, d.stripe_lookup_pages),
            (false, std::time::Duration::from_secs(60), 10)
        );
        let set = Cli::parse_from([
            "x",
            "--stripe-search",
            "true",
            "--stripe-search-lag",
            "90s",
            "--stripe-lookup-pages",
            "3",
        ])
        .g;
        assert_eq!(
            (
                set.stripe_search,
                set.stripe_search_lag,
                set.stripe_lookup_pages
            ),
            (true, std::time::Duration::from_secs(90), 3)
        );
        let zero = Cli::try_parse_from(["x", "--stripe-lookup-pages", "0"]);
        assert!(
            zero.err()
                .is_some_and(|e| e.to_string().contains("stripe-lookup-pages"))
        );
        let lag = Cli::try_parse_from(["x", "--stripe-search-lag", "soon"]);
        assert!(
            lag.err()
                .is_some_and(|e| e.to_string().contains("stripe-search-lag"))
        );
    }

    #[test]
    fn no_gateway_is_chosen_silently() {
        let err = |argv: &[&str], url: Option<&str>| {
            Cli::parse_from(argv)
                .g
                .resolve(url)
                .unwrap_err()
                .to_string()
        };
        let neither = err(&["x"], None);
        for named in [
            "COBRO_GATEWAY",
            "GATEWAY_URL",
            "STRIPE_SECRET_KEY",
            "cobro gateway-sim",
        ] {
            assert!(neither.contains(named), "{neither}");
        }
        assert!(err(&["x", "--gateway", "sim"], None).contains("needs GATEWAY_URL"));
        assert!(err(&["x", "--gateway", "sim"], Some(" ")).contains("needs GATEWAY_URL"));
        let url = Some("http://127.0.0.1:8089");
        assert_eq!(
            Cli::parse_from(["x"]).g.resolve(url).unwrap(),
            GatewayKind::Sim
        );
        let sim = Cli::parse_from(["x", "--gateway", "sim"]).g;
        assert_eq!(sim.resolve(url).unwrap(), GatewayKind::Sim);
    }

    #[test]
    fn a_stripe_key_must_be_a_secret_or_restricted_key() {
        let resolve = |key: &str| {
            Cli::parse_from(["x", "--gateway", "stripe", "--stripe-secret-key", key])
                .g
                .resolve(None)
                .map_err(|e| e.to_string())
        };
        for good in ["sk_test_abc", "sk_live_abc", "rk_test_abc", "rk_live_abc"] {
            assert_eq!(resolve(good), Ok(GatewayKind::Stripe), "{good}");
        }
        let pk = resolve("pk_live_supersecretish").unwrap_err();
        assert!(
            pk.contains("STRIPE_SECRET_KEY") && pk.contains("publishable"),
            "{pk}"
        );
        assert!(!pk.contains("supersecretish"), "{pk}");
        let odd = resolve("whsec_notakey").unwrap_err();
        assert!(
            odd.contains("STRIPE_SECRET_KEY") && odd.contains("\"whs\""),
            "{odd}"
        );
        assert!(!odd.contains("notakey"), "{odd}");
    }
}
