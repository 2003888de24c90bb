//! Which gateway API a process speaks (`COBRO_GATEWAY`): cobro's simulator
//! API at `GATEWAY_URL`, or Stripe's at `STRIPE_API_BASE` with
//! `STRIPE_SECRET_KEY`. Checked at start-up, before any work is taken.
//!
//! Invariant: the secret key appears in no `Debug`, no log and no `--help`
//! output (`hide_env_values`).

use std::sync::Arc;

use clap::{ArgAction, Args, ValueEnum};

use super::stripe::{DEFAULT_API_BASE, SecretKey, StripeConfig, StripeGateway};
use super::{Gateway, GatewayConfigError, HttpGateway, HttpGatewayConfig, shown_url};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum GatewayKind {
    /// cobro's simulator API (`cobro gateway-sim`), at `GATEWAY_URL`.
    #[default]
    Sim,
    /// Stripe's API (or a Stripe-compatible server) at `STRIPE_API_BASE`.
    Stripe,
}

#[derive(Clone, Args)]
pub struct GatewayChoice {
    /// Which gateway API to speak: `sim` or `stripe`.
    #[arg(
        long = "gateway",
        env = "COBRO_GATEWAY",
        value_enum,
        default_value = "sim"
    )]
    pub kind: GatewayKind,
    /// Stripe's secret (or restricted) API key; never logged.
    #[arg(long, env = "STRIPE_SECRET_KEY", hide_env_values = true)]
    pub stripe_secret_key: Option<String>,
    /// Stripe's API base URL, or a Stripe-compatible server's.
    #[arg(long, env = "STRIPE_API_BASE", default_value = DEFAULT_API_BASE)]
    pub stripe_api_base: String,
    /// Confirm business retries as merchant-initiated (`off_session=true`).
    #[arg(long, env = "STRIPE_OFF_SESSION_RETRIES", default_value_t = true, action = ArgAction::Set)]
    pub stripe_off_session_retries: bool,
    /// Send the `created` window to Stripe's list endpoints; false for a
    /// compatible server without that filter (localstripe).
    #[arg(long, env = "STRIPE_CREATED_FILTER", default_value_t = true, action = ArgAction::Set)]
    pub stripe_created_filter: bool,
}

impl Default for GatewayChoice {
    /// The simulator's API, and Stripe's settings at their defaults.
    fn default() -> Self {
        Self {
            kind: GatewayKind::Sim,
            stripe_secret_key: None,
            stripe_api_base: DEFAULT_API_BASE.into(),
            stripe_off_session_retries: true,
            stripe_created_filter: true,
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
    /// The adapter, with the timeouts and trust of `http`; `http.base_url`
    /// is the simulator's URL.
    pub fn build(&self, http: HttpGatewayConfig) -> Result<Arc<dyn Gateway>, GatewayConfigError> {
        Ok(match self.kind {
            GatewayKind::Sim => Arc::new(HttpGateway::new(http)?),
            GatewayKind::Stripe => Arc::new(StripeGateway::new(StripeConfig {
                api_base: self.stripe_api_base.clone(),
                secret_key: SecretKey::new(self.stripe_secret_key.as_deref().unwrap_or_default()),
                connect_timeout: http.connect_timeout,
                request_timeout: http.request_timeout,
                ca_file: http.ca_file,
                off_session_retries: self.stripe_off_session_retries,
                created_filter: self.stripe_created_filter,
            })?),
        })
    }

    /// The gateway's URL as it may be shown (and names its breaker).
    pub fn shown(&self, sim_url: &str) -> String {
        match self.kind {
            GatewayKind::Sim => shown_url(sim_url),
            GatewayKind::Stripe => shown_url(&self.stripe_api_base),
        }
    }

    /// Stripe answers "what happened" by PaymentIntent id, strongly
    /// consistent, and a PaymentIntent succeeds at most once: a lookup's
    /// "not confirmed" always allows confirming it again.
    pub fn idempotent_lookups(&self) -> bool {
        self.kind == GatewayKind::Stripe
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
        let http = HttpGatewayConfig {
            base_url: "http://127.0.0.1:1".into(),
            connect_timeout: std::time::Duration::from_secs(1),
            request_timeout: std::time::Duration::from_secs(1),
            ca_file: None,
        };
        assert!(cli.g.build(http.clone()).is_ok());
        let no_key = Cli::parse_from(["x", "--gateway", "stripe"]);
        let err = no_key.g.build(http).err().map(|e| e.to_string());
        assert!(
            err.is_some_and(|e| e.contains("STRIPE_SECRET_KEY")),
            "refused at start-up"
        );
    }
}
