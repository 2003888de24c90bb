//! Command-line arguments of the gateway simulator (`SimArgs`, flattened into the binary's
//! CLI) and their translation into a `SimConfig`.
//!
//! Invariant: every `Faults` field has exactly one flag, probabilities are rejected at parse
//! time unless they lie in `[0, 1]`, and `SimArgs::config` is a pure mapping of the flags.

use std::net::SocketAddr;

use super::{
    SimConfig,
    faults::{Faults, check_probability, check_rate},
    proxy,
    upstream::Upstream,
};

fn probability(s: &str) -> Result<f64, String> {
    let p: f64 = s
        .parse()
        .map_err(|e| format!("not a number: {s:?} ({e})"))?;
    check_probability(p)?;
    Ok(p)
}

fn rate(s: &str) -> Result<f64, String> {
    let r: f64 = s
        .parse()
        .map_err(|e| format!("not a number: {s:?} ({e})"))?;
    check_rate(r)?;
    Ok(r)
}

/// Flags of the `sim` command.
#[derive(clap::Args, Clone)]
pub struct SimArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8089")]
    pub listen: SocketAddr,
    /// Seed of the fault-injection rng (same seed + same request order = same faults).
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Execute every request, even with a repeated Idempotency-Key.
    #[arg(long)]
    pub no_idempotency: bool,
    /// Probability that a charge or refund executes but the connection drops with no response.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    pub p_response_lost: f64,
    /// Probability that a charge or refund executes but the reply is held for --hold-ms.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    pub p_timeout_after_charge: f64,
    /// Probability that a request is held for --hold-ms then dropped, never executed.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    pub p_request_lost: f64,
    /// Probability of a 503 before executing a charge or refund.
    #[arg(long = "p-5xx", default_value_t = 0.0, value_parser = probability)]
    pub p_5xx: f64,
    /// Probability that a lookup answers 503.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    pub p_lookup_fail: f64,
    /// Probability that an executed charge is a decline.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    pub p_decline: f64,
    /// Decline code to pick from (repeatable); none means "card_declined".
    #[arg(long = "decline-code")]
    pub decline_codes: Vec<String>,
    /// The card network's advice with every decline, as a Mastercard
    /// merchant advice code (03 do not try again; 24-30 retry after 1 h-10 d).
    #[arg(long)]
    pub decline_network_advice: Option<String>,
    /// Latency added before every charge, refund and lookup, in milliseconds.
    #[arg(long, default_value_t = 0)]
    pub latency_ms: u64,
    /// How long held requests wait, in milliseconds (0 = 30000).
    #[arg(long, default_value_t = 0)]
    pub hold_ms: u64,
    /// Answer 503 to every charge, refund and lookup.
    #[arg(long)]
    pub outage: bool,
    /// Requests per second allowed across charges, refunds, lookups and listings (token
    /// bucket); above it 429 with Retry-After, nothing executed. 0 = no limit.
    #[arg(long, default_value_t = 0.0, value_parser = rate)]
    pub rate_limit_per_s: f64,
    /// Requests let through at once after a quiet spell (0 = the rate, at least 1).
    #[arg(long, default_value_t = 0)]
    pub rate_limit_burst: u32,
    /// Probability of a 503 with Retry-After before executing a charge or refund.
    #[arg(long = "p-503-retry-after", default_value_t = 0.0, value_parser = probability)]
    pub p_503_retry_after: f64,
    /// The Retry-After of those 503s, in seconds (0 = 1).
    #[arg(long, default_value_t = 0)]
    pub retry_after_s: u64,
    /// Processing time of every executed charge or refund before its reply, in ms.
    #[arg(long, default_value_t = 0)]
    pub execution_ms: u64,
    /// Record a charge or refund only when its processing (--execution-ms, a held reply)
    /// ends: until then lookups answer 404 and, without idempotency, a resend executes again.
    #[arg(long)]
    pub record_on_complete: bool,
    /// First refusal window (nothing listening: connection refused) starts this many ms
    /// after start-up.
    #[arg(long, default_value_t = 0)]
    pub refuse_at_ms: u64,
    /// Length of each refusal window in ms (0 = none).
    #[arg(long, default_value_t = 0)]
    pub refuse_for_ms: u64,
    /// Start a new refusal window this many ms after the previous one started (0 = once;
    /// must exceed --refuse-for-ms).
    #[arg(long, default_value_t = 0)]
    pub refuse_every_ms: u64,
    /// Settlement: each charge's fee in hundredths of a percent of its gross (290 = 2.9 %).
    #[arg(long, default_value_t = 0)]
    pub settle_fee_bps: u32,
    /// Settlement: each charge's fixed fee, in minor units.
    #[arg(long, default_value_t = 0)]
    pub settle_fee_fixed_minor: i64,
    /// Settlement fault: every Nth approved charge is never settled (0 = none).
    #[arg(long, default_value_t = 0)]
    pub unsettled_every: u64,
    /// Settlement fault: every Nth approved charge gets --fee-off-minor more fee (0 = none).
    #[arg(long, default_value_t = 0)]
    pub fee_off_every: u64,
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    pub fee_off_minor: i64,
    /// Settlement fault: each payout pays this much more (or less) than its lines' net.
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    pub payout_off_minor: i64,
    /// Draw faults per order (seed, order id, request number) instead of in arrival order.
    #[arg(long)]
    pub per_order_draws: bool,
    /// Send a signed webhook for every executed charge to this URL.
    #[arg(long, requires = "webhook_secret")]
    pub webhook_url: Option<String>,
    /// The signing secret (`whsec_<base64>` for Standard Webhooks).
    #[arg(long, env = "COBRO_SIM_WEBHOOK_SECRET", hide_env_values = true)]
    pub webhook_secret: Option<String>,
    /// `standard` or `stripe`.
    #[arg(long, default_value = "standard")]
    pub webhook_scheme: String,
    /// Deliver each event this many times.
    #[arg(long, default_value_t = 1)]
    pub webhook_copies: u32,
    /// Wait before each delivery, in ms.
    #[arg(long, default_value_t = 0)]
    pub webhook_delay_ms: u64,
    /// Plus a seeded random 0..=N ms per copy (reorders events).
    #[arg(long, default_value_t = 0)]
    pub webhook_jitter_ms: u64,
    /// Proxy mode: forward every /v1/ request to this server (http://, loopback expected,
    /// e.g. localstripe) with the seeded faults around it; GET /control/proxy counts them.
    /// The upstream decides outcomes, so --p-decline, --decline-code, --record-on-complete,
    /// --execution-ms, --no-idempotency, --per-order-draws and --webhook-url are refused.
    #[arg(long, value_name = "URL")]
    pub upstream: Option<Upstream>,
}

impl SimArgs {
    /// The simulator configuration these flags describe (the faults already validated).
    pub fn config(&self) -> Result<SimConfig, String> {
        let webhooks = match (&self.webhook_url, &self.webhook_secret) {
            (Some(url), Some(secret)) => {
                let scheme: crate::webhook::Scheme = self
                    .webhook_scheme
                    .parse()
                    .map_err(|e| format!("--webhook-scheme: {e}"))?;
                let signer = crate::webhook::Verifier::from_env_value(scheme, secret)
                    .map_err(|e| format!("--webhook-secret: {e}"))?;
                Some(super::WebhookTarget {
                    url: url.clone(),
                    signer,
                    copies: self.webhook_copies,
                    delay_ms: self.webhook_delay_ms,
                    jitter_ms: self.webhook_jitter_ms,
                })
            }
            _ => None,
        };
        let config = SimConfig {
            webhooks,
            idempotent: !self.no_idempotency,
            seed: self.seed,
            per_order_draws: self.per_order_draws,
            faults: Faults {
                p_response_lost: self.p_response_lost,
                p_timeout_after_charge: self.p_timeout_after_charge,
                p_request_lost: self.p_request_lost,
                p_5xx: self.p_5xx,
                p_lookup_fail: self.p_lookup_fail,
                p_decline: self.p_decline,
                decline_codes: self.decline_codes.clone(),
                decline_network_advice: self.decline_network_advice.clone(),
                latency_ms: self.latency_ms,
                hold_ms: self.hold_ms,
                outage: self.outage,
                rate_limit_per_s: self.rate_limit_per_s,
                rate_limit_burst: self.rate_limit_burst,
                p_503_retry_after: self.p_503_retry_after,
                retry_after_s: self.retry_after_s,
                execution_ms: self.execution_ms,
                record_on_complete: self.record_on_complete,
                refuse_at_ms: self.refuse_at_ms,
                refuse_for_ms: self.refuse_for_ms,
                refuse_every_ms: self.refuse_every_ms,
                settle_fee_bps: self.settle_fee_bps,
                settle_fee_fixed_minor: self.settle_fee_fixed_minor,
                unsettled_every: self.unsettled_every,
                fee_off_every: self.fee_off_every,
                fee_off_minor: self.fee_off_minor,
                payout_off_minor: self.payout_off_minor,
            },
        };
        config
            .faults
            .validate()
            .map_err(|e| format!("--{}: {}", e.field.replace('_', "-"), e.message))?;
        if self.upstream.is_some() {
            proxy::check_config(&config)?;
        }
        Ok(config)
    }

    /// The upstream of proxy mode, if any.
    pub fn upstream(&self) -> Option<&Upstream> {
        self.upstream.as_ref()
    }

    /// The address to listen on.
    pub fn listen(&self) -> SocketAddr {
        self.listen
    }
}

/// By hand: `webhook_secret` signs the simulator's webhooks.
impl std::fmt::Debug for SimArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimArgs")
            .field("webhook_url", &self.webhook_url)
            .field(
                "webhook_secret",
                &self.webhook_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("webhook_scheme", &self.webhook_scheme)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        sim: SimArgs,
    }

    #[test]
    fn defaults() -> Result<(), clap::Error> {
        let cli = Cli::try_parse_from(["sim"])?;
        assert_eq!(cli.sim.listen().to_string(), "127.0.0.1:8089");
        let cfg = cli.sim.config().unwrap();
        assert!(cfg.idempotent);
        assert_eq!(cfg.seed, 42);
        assert_eq!(cfg.faults, Faults::default());
        Ok(())
    }

    #[test]
    fn every_fault_flag() -> Result<(), clap::Error> {
        let cli = Cli::try_parse_from([
            "sim",
            "--listen",
            "127.0.0.1:9000",
            "--seed",
            "7",
            "--no-idempotency",
            "--p-response-lost",
            "0.15",
            "--p-timeout-after-charge",
            "0.1",
            "--p-request-lost",
            "0.05",
            "--p-5xx",
            "0.2",
            "--p-lookup-fail",
            "0.3",
            "--p-decline",
            "0.25",
            "--decline-code",
            "insufficient_funds",
            "--decline-code",
            "do_not_honor",
            "--latency-ms",
            "5",
            "--hold-ms",
            "100",
            "--outage",
        ])?;
        let cfg = cli.sim.config().unwrap();
        assert_eq!(cli.sim.listen().port(), 9000);
        assert!(!cfg.idempotent);
        assert_eq!(cfg.seed, 7);
        assert_eq!(
            cfg.faults,
            Faults {
                p_response_lost: 0.15,
                p_timeout_after_charge: 0.1,
                p_request_lost: 0.05,
                p_5xx: 0.2,
                p_lookup_fail: 0.3,
                p_decline: 0.25,
                decline_codes: vec!["insufficient_funds".into(), "do_not_honor".into()],
                latency_ms: 5,
                hold_ms: 100,
                outage: true,
                ..Faults::default()
            }
        );
        Ok(())
    }

    #[test]
    fn load_shedding_record_on_complete_and_refusal_flags() -> Result<(), clap::Error> {
        let cli = Cli::try_parse_from([
            "sim",
            "--rate-limit-per-s",
            "12.5",
            "--rate-limit-burst",
            "20",
            "--p-503-retry-after",
            "0.1",
            "--retry-after-s",
            "3",
            "--execution-ms",
            "250",
            "--record-on-complete",
            "--refuse-at-ms",
            "10000",
            "--refuse-for-ms",
            "3000",
            "--refuse-every-ms",
            "60000",
        ])?;
        assert_eq!(
            cli.sim.config().map(|c| c.faults),
            Ok(Faults {
                rate_limit_per_s: 12.5,
                rate_limit_burst: 20,
                p_503_retry_after: 0.1,
                retry_after_s: 3,
                execution_ms: 250,
                record_on_complete: true,
                refuse_at_ms: 10_000,
                refuse_for_ms: 3_000,
                refuse_every_ms: 60_000,
                ..Faults::default()
            })
        );
        assert!(Cli::try_parse_from(["sim", "--rate-limit-per-s", "-1"]).is_err());
        assert!(Cli::try_parse_from(["sim", "--p-503-retry-after", "2"]).is_err());
        // Windows that would overlap are refused when the configuration is made.
        let overlapping = Cli::try_parse_from([
            "sim",
            "--refuse-for-ms",
            "5000",
            "--refuse-every-ms",
            "5000",
        ])?;
        let refused = overlapping.sim.config().map(|_| ());
        assert!(
            matches!(refused, Err(ref e) if e.starts_with("--refuse-every-ms")),
            "{refused:?}"
        );
        Ok(())
    }

    #[test]
    fn upstream_flag_and_what_proxy_mode_refuses() -> Result<(), clap::Error> {
        let cli = Cli::try_parse_from(["sim", "--upstream", "http://127.0.0.1:8420/"])?;
        assert_eq!(
            cli.sim.upstream().map(ToString::to_string).as_deref(),
            Some("http://127.0.0.1:8420")
        );
        assert!(cli.sim.config().is_ok());
        assert!(Cli::try_parse_from(["sim", "--upstream", "https://127.0.0.1:8420"]).is_err());
        let refused = Cli::try_parse_from([
            "sim",
            "--upstream",
            "http://127.0.0.1:8420",
            "--p-decline",
            "0.1",
            "--record-on-complete",
        ])?
        .sim
        .config()
        .map(|_| ());
        assert!(
            matches!(refused, Err(ref e) if e.contains("--p-decline, --record-on-complete")),
            "{refused:?}"
        );
        // Without --upstream the same flags are the simulator's own.
        let own = Cli::try_parse_from(["sim", "--p-decline", "0.1"])?;
        assert!(own.sim.config().is_ok());
        Ok(())
    }

    #[test]
    fn rejects_bad_probability() {
        assert!(Cli::try_parse_from(["sim", "--p-5xx", "1.5"]).is_err());
        assert!(Cli::try_parse_from(["sim", "--p-decline", "abc"]).is_err());
    }
}
