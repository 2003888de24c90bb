//! The `cobro serve` process: its settings ([`ServeArgs`], flags or
//! environment variables) and [`run`], which checks them, connects to the
//! database, binds the listeners and serves [`WebConfig`]'s routes until
//! shutdown.
//!
//! Invariant: the process refuses to start on malformed webhook secrets,
//! API keys or limits, naming the variable; it starts without webhook
//! secrets (the webhook route is then off, warned once) and on a schema
//! that is missing or behind (warned; `/ready` answers 503 naming
//! `cobro migrate`).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tracing::{info, warn};

use super::{WebConfig, finance};
use crate::backoff::parse_duration_arg as duration;
use crate::http::auth::ApiKeyArgs;
use crate::http::serve::{HttpLimits, serve};
use crate::store::Store;
use crate::webhook::{Scheme, Verifier};

/// Every setting of `cobro serve`, as a flag or an environment variable.
#[derive(Clone, Args)]
pub struct ServeArgs {
    /// Where to listen. Unset: `0.0.0.0:$PORT` when the platform sets
    /// `PORT` (Heroku, Dokku, honcho), else `127.0.0.1:8080`.
    #[arg(long, env = "COBRO_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// The port a Procfile platform assigns; used only when `COBRO_LISTEN`
    /// is unset.
    #[arg(long, env = "PORT", hide = true)]
    pub port: Option<u16>,
    /// A second listener for the API, finance and metrics (e.g. on a private
    /// network); the public one then serves only webhooks and /health.
    #[arg(long, env = "COBRO_INTERNAL_LISTEN")]
    pub internal_listen: Option<SocketAddr>,
    /// `postgres://…` or `sqlite://path`.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// Active webhook signing secrets, comma-separated (several during a
    /// rotation). Standard Webhooks: `whsec_<base64>`; Stripe: `whsec_…`.
    /// Unset: the webhook route is off (404) and everything else serves.
    #[arg(
        long,
        env = "COBRO_WEBHOOK_SECRETS",
        hide_env_values = true,
        default_value = "",
        hide_default_value = true
    )]
    pub webhook_secrets: String,
    /// `standard` (Standard Webhooks) or `stripe` (`Stripe-Signature`).
    #[arg(long, env = "COBRO_WEBHOOK_SCHEME", default_value = "standard")]
    pub webhook_scheme: String,
    /// How far a webhook's timestamp may be from now, either way.
    #[arg(long, env = "COBRO_WEBHOOK_TOLERANCE", default_value = "300s", value_parser = duration)]
    pub webhook_tolerance: Duration,
    /// Largest accepted webhook body; larger ones get 413.
    #[arg(long, env = "COBRO_MAX_BODY_BYTES", default_value_t = 65_536)]
    pub max_body_bytes: usize,
    /// A webhook's whole body must arrive within this (a gateway sends it
    /// at once); else 408 and the connection is closed.
    #[arg(long, env = "COBRO_WEBHOOK_BODY_TIMEOUT", default_value = "5s", value_parser = duration)]
    pub webhook_body_timeout: Duration,
    /// Database gauges on `/metrics` are reused for this long.
    #[arg(long, env = "COBRO_METRICS_CACHE", default_value = "5s", value_parser = duration)]
    pub metrics_cache: Duration,
    /// Who may call the API, finance and metrics routes.
    #[command(flatten)]
    pub api_keys: ApiKeyArgs,
    /// Timeouts and the connection limit of every listener.
    #[command(flatten)]
    pub http: HttpLimits,
    /// A decline by webhook schedules the business retry like the worker does.
    #[command(flatten)]
    pub retry: crate::retry::RetryArgs,
    /// The finance pages and API.
    #[command(flatten)]
    pub finance: finance::FinanceArgs,
}

impl std::fmt::Debug for ServeArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeArgs")
            .field("listen", &self.listen_addr())
            .field("internal_listen", &self.internal_listen)
            .field("webhook_scheme", &self.webhook_scheme)
            .field("webhook_secrets", &"<redacted>")
            .field("api_keys", &self.api_keys)
            .finish_non_exhaustive()
    }
}

impl ServeArgs {
    /// `COBRO_LISTEN`, else `0.0.0.0:$PORT`, else `127.0.0.1:8080`.
    pub fn listen_addr(&self) -> SocketAddr {
        match (self.listen, self.port) {
            (Some(addr), _) => addr,
            (None, Some(port)) => SocketAddr::from(([0, 0, 0, 0], port)),
            (None, None) => SocketAddr::from(([127, 0, 0, 1], 8080)),
        }
    }

    /// The webhook verifier; `None` when no secrets are set (the webhook
    /// route is then off).
    pub fn verifier(&self) -> anyhow::Result<Option<Verifier>> {
        if self.webhook_secrets.trim().is_empty() {
            return Ok(None);
        }
        let scheme: Scheme = self
            .webhook_scheme
            .parse()
            .map_err(|e| anyhow::anyhow!("COBRO_WEBHOOK_SCHEME: {e}"))?;
        let verifier = Verifier::from_env_value(scheme, &self.webhook_secrets)
            .map_err(|e| anyhow::anyhow!("COBRO_WEBHOOK_SECRETS: {e}"))?;
        Ok(Some(verifier.with_tolerance(self.webhook_tolerance)))
    }
}

/// Runs the web process until `shutdown` resolves.
pub async fn run(
    args: ServeArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let verifier = args.verifier()?;
    let retry = args
        .retry
        .policy()
        .map_err(|e| anyhow::anyhow!("COBRO_RETRY_SCHEDULE: {e}"))?;
    let keys = args.api_keys.keys().map_err(anyhow::Error::msg)?;
    args.http.check().map_err(anyhow::Error::msg)?;
    if args.webhook_body_timeout.is_zero() {
        anyhow::bail!("COBRO_WEBHOOK_BODY_TIMEOUT must be more than 0");
    }
    if args.finance.form_token_ttl.is_zero() {
        anyhow::bail!("COBRO_FORM_TOKEN_TTL must be more than 0 (every form would be refused)");
    }
    if keys.is_empty() {
        warn!(
            "no API keys (COBRO_API_KEYS): only the webhook receiver, /health and /ready will answer"
        );
    }
    if verifier.is_none() {
        warn!(
            "no webhook secrets (COBRO_WEBHOOK_SECRETS): POST /webhooks/gateway answers 404; set COBRO_WEBHOOK_SECRETS (and COBRO_WEBHOOK_SCHEME) to receive the gateway's webhooks"
        );
    }
    let store = Store::connect(&args.database_url, 10)
        .await
        .context("connecting to DATABASE_URL")?;
    // Served anyway: /health and /ready say the same to the platform.
    if let Some(problem) = store.readiness().await?.problem() {
        warn!("{problem}; /ready answers 503 until then");
    }
    let addr = args.listen_addr();
    let public = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let internal = match args.internal_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding COBRO_INTERNAL_LISTEN {addr}"))?,
        ),
        None => None,
    };
    let cfg = WebConfig {
        store,
        verifier,
        keys,
        retry,
        finance: args.finance.config(),
        max_webhook_body: args.max_body_bytes,
        webhook_body_timeout: args.webhook_body_timeout,
        metrics_cache: args.metrics_cache,
    };
    info!(
        addr = %public.local_addr()?,
        keys = cfg.keys.len(),
        scheme = ?cfg.verifier.as_ref().map(Verifier::scheme),
        "cobro web listening"
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    match internal {
        None => serve(public, cfg.router(), &args.http, stopped()).await?,
        Some(internal) => {
            info!(addr = %internal.local_addr()?, "API, finance and metrics on the internal listener");
            let (public_routes, internal_routes) = cfg.split();
            tokio::try_join!(
                serve(public, public_routes, &args.http, stopped()),
                serve(internal, internal_routes, &args.http, stopped()),
            )?;
        }
    }
    info!("cobro web stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: super::ServeArgs,
    }

    fn listen(args: &[&str]) -> String {
        let mut argv = vec![
            "cobro",
            "--database-url",
            "sqlite://x",
            "--webhook-secrets",
            "s",
        ];
        argv.extend_from_slice(args);
        Cli::parse_from(argv).serve.listen_addr().to_string()
    }

    #[test]
    fn listen_follows_cobro_listen_then_port_then_loopback() {
        assert_eq!(listen(&[]), "127.0.0.1:8080");
        assert_eq!(listen(&["--port", "5000"]), "0.0.0.0:5000");
        assert_eq!(
            listen(&["--port", "5000", "--listen", "127.0.0.1:9000"]),
            "127.0.0.1:9000"
        );
    }
}
