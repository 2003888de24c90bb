//! `cobro`: the command-line tool: migrate the database, enqueue a charge,
//! request a refund, show an attempt's state and history, reconcile a window
//! with the gateway, run the gateway simulator, print the reference pages.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use uuid::Uuid;

use cobro::domain::MaxAmount;

mod cli;

use cli::escalations::EscalationCommand;

#[derive(Parser)]
#[command(
    name = "cobro",
    version,
    about = "Charges payments so that a retry never charges twice"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Create or upgrade the database schema (apalis' and cobro's).
    Migrate {
        /// The database: `postgres://…` or `sqlite://path`.
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: String,
        /// Set the largest `amount_minor` every door accepts (POST /charges,
        /// POST /refunds, the SQL functions, the CLI, the Rust API): it is
        /// kept in the database's settings row, which the database checks
        /// on every attempt it stores. Unset: the row keeps its value
        /// (99999999 when created). At most 999999999999.
        #[arg(long, env = "COBRO_MAX_AMOUNT_MINOR",
              value_parser = cobro::domain::parse_max_amount_arg)]
        max_amount_minor: Option<MaxAmount>,
    },
    /// Record a charge attempt with its idempotency key and wake a worker.
    Enqueue {
        /// The database: `postgres://…` or `sqlite://path`.
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: String,
        /// The app's order id.
        #[arg(long = "order")]
        order_id: String,
        /// Integer minor units (cents): 1999 = 19.99 USD.
        #[arg(long, allow_negative_numbers = true)]
        amount_minor: i64,
        /// ISO 4217 code, e.g. USD.
        #[arg(long)]
        currency: String,
        /// The intent's key (a UUID); generated when absent.
        #[arg(long)]
        key: Option<String>,
        /// The gateway's opaque payment-method token (never card data).
        #[arg(long)]
        payment_method: Option<String>,
        /// The gateway's customer the payment method is saved to (Stripe:
        /// `cus_…`); an opaque id, never card data.
        #[arg(long)]
        customer: Option<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show attempts with their state and full transition history; with
    /// neither --order nor --attempt, the whole system: attempts per state,
    /// the gateway's breaker and the attempts waiting for it.
    Status {
        /// The database: `postgres://…` or `sqlite://path`.
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: String,
        /// An order id: that order's attempts.
        #[arg(long = "order", conflicts_with = "attempt")]
        order_id: Option<String>,
        /// One attempt's id.
        #[arg(long)]
        attempt: Option<Uuid>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Redraw every --interval until Ctrl-C (on a terminal, in place;
        /// piped, one snapshot after another, separated by a blank line).
        #[arg(long)]
        watch: bool,
        /// How often --watch redraws.
        #[arg(long, default_value = "2s", value_parser = cobro::backoff::parse_duration_arg, requires = "watch")]
        interval: std::time::Duration,
    },
    /// A manual business retry (finance): the declined attempt's retry made
    /// due now. A worker looks it up at the gateway first, then creates a NEW
    /// attempt with a NEW (derived) key through the same guards as an
    /// automatic retry. Refused at once while the database's charge rule
    /// holds the order (approved, live, an open case, a do-not-charge cancel),
    /// or while the card is at a card network's cap unless
    /// --override-reason says why it may be passed (kept in the log).
    Retry {
        /// The database: `postgres://…` or `sqlite://path`.
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: String,
        /// The declined attempt.
        #[arg(long)]
        attempt: Uuid,
        /// Who asks (kept in the transition log).
        #[arg(long)]
        actor: String,
        /// Pass the card networks' caps, for this reason (required to
        /// override; kept in the attempt's log and shown on it).
        #[arg(long)]
        override_reason: Option<String>,
        #[command(flatten)]
        caps: cobro::retry::CardCapArgs,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Refund (part of) an APROBADO charge: a refund attempt with its own key,
    /// sent by a worker with the same unknown/lookup/escalation handling as
    /// a charge. The same key again returns the same refund.
    Refund {
        /// The database: `postgres://…` or `sqlite://path`.
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: String,
        /// The APROBADO charge attempt to refund.
        #[arg(long)]
        attempt: Uuid,
        /// Integer minor units to refund (at most what is left of the charge).
        #[arg(long, allow_negative_numbers = true)]
        amount_minor: i64,
        /// The refund's key (a UUID); generated when absent. Pass the same
        /// key when retrying the same refund request.
        #[arg(long)]
        key: Option<String>,
        /// Who asks (kept in the transition log).
        #[arg(long, default_value = "cli")]
        actor: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Stop everything of an order not yet sent: unclaimed PENDIENTE
    /// attempts become RECHAZADO (cancelled) and scheduled business retries
    /// are dropped, with the reason and who in the log. Refused, with
    /// nothing cancelled, while an attempt may have reached the gateway.
    Cancel {
        /// The database: `postgres://…` or `sqlite://path`.
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: String,
        #[arg(long)]
        order: String,
        /// paid_by_other_means, customer_request, fraud_suspected,
        /// duplicate_order or other.
        #[arg(long, value_parser = cobro::store::CancelReason::parse)]
        reason: cobro::store::CancelReason,
        /// Who asks (kept in the transition log).
        #[arg(long, default_value = "cli")]
        actor: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The incident switch: stop sending new charges on every worker
    /// (within a second); lookups, refunds and the review janitor go on,
    /// and attempts due meanwhile wait, parked.
    Pause {
        /// The database: `postgres://…` or `sqlite://path`.
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: String,
        /// Why (shown on finance's page and in `cobro status`).
        #[arg(long)]
        reason: String,
        #[arg(long, default_value = "cli")]
        actor: String,
    },
    /// Turn the incident switch off: sending resumes, and what waited is
    /// re-woken a few per second.
    Resume {
        /// The database: `postgres://…` or `sqlite://path`.
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: String,
        #[arg(long, default_value = "cli")]
        actor: String,
    },
    /// A new payment-method token for the order's next business retry
    /// (only while its latest attempt is declined with a retry pending).
    PaymentMethod {
        /// The database: `postgres://…` or `sqlite://path`.
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: String,
        #[arg(long)]
        order: String,
        /// The gateway's payment-method token (never card data).
        #[arg(long)]
        token: String,
        #[arg(long, default_value = "cli")]
        actor: String,
    },
    /// The customer-notice outbox: list notices, or acknowledge one.
    Notices {
        /// The database: `postgres://…` or `sqlite://path`.
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: String,
        /// Include acknowledged notices.
        #[arg(long)]
        all: bool,
        /// Acknowledge this notice id instead of listing.
        #[arg(long, requires = "by")]
        ack: Option<i64>,
        /// Who acknowledges.
        #[arg(long)]
        by: Option<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Finance's escalation queue: attempts in EN_REVISION and stale
    /// DESCONOCIDO ones; list, show, resolve, summarize.
    Escalations {
        /// The database: `postgres://…` or `sqlite://path`.
        #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
        database_url: Option<String>,
        /// A DESCONOCIDO attempt older than this reaches finance.
        #[arg(long, env = "COBRO_STALE_AFTER", default_value = "1h", value_parser = cobro::backoff::parse_duration_arg, global = true)]
        stale_after: std::time::Duration,
        #[command(subcommand)]
        command: EscalationCommand,
    },
    /// The operator view: every attempt (charges and refunds, any state),
    /// newest first, a page at a time, searched by --order, --key, --state,
    /// --kind, --from, --to; `cobro attempts show <id>` for one attempt
    /// with its history and lookups.
    Attempts(cli::attempts::AttemptsArgs),
    /// Compare the gateway's charges and refunds of a window with ours and
    /// open a case once per discrepancy (see docs/src/guides/reconciliation.md).
    Reconcile(cobro::recon::ReconcileCommand),
    /// Run the web process: gateway webhooks, the HTTP API, finance,
    /// metrics, health.
    Serve(cobro::web::ServeArgs),
    /// Make an API key: prints a new random secret (give it to the caller;
    /// it is shown once) and the entry for COBRO_API_KEYS, which holds only
    /// its SHA-256.
    ApiKey {
        /// The key's name: the actor in the transition log (`api:<name>`,
        /// `finance:<name>`) and the Basic sign-in name on finance pages.
        #[arg(long)]
        name: String,
        /// Comma-separated: charges:write, refunds:write, attempts:read,
        /// finance:read, finance:write, metrics:read.
        #[arg(long)]
        scopes: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The soak: real worker, web and simulator processes on a fresh
    /// PostgreSQL database, faults at the gateway, SIGKILLed workers and
    /// PostgreSQL restarts; exits non-zero on any violation.
    Chaos(cobro::chaos::ChaosArgs),
    /// Run the gateway simulator (a real HTTP server with its own ledger).
    GatewaySim(cobro::sim::SimArgs),
    /// Print the OpenAPI 3.1 document of the web process's HTTP API (JSON),
    /// the same that `cobro serve` answers at `GET /openapi.json`.
    Openapi,
    /// Print a reference page as Markdown, made from the definitions of
    /// these commands: `cobro reference settings` (every environment
    /// variable and flag, per process) or `cobro reference cli` (every
    /// command). docs/src/reference/ holds the pages it printed.
    Reference {
        #[command(subcommand)]
        page: cli::reference::ReferencePage,
    },
    /// A side-by-side demonstration on the real engine: a naive client (it
    /// retries a lost response without a stable key) and cobro charge the
    /// same orders against the same simulated faults; the report counts what
    /// each charged.
    Demo {
        /// Orders to charge (amounts drawn between 10.00 and 500.00).
        #[arg(long, default_value_t = 1000)]
        orders: usize,
        /// Probability that the gateway's response is lost after charging.
        #[arg(long, default_value_t = 0.15)]
        loss: f64,
        /// Seed of the simulated faults: the same seed gives the same run.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// cobro workers per world (in this process).
        #[arg(long, default_value_t = 4)]
        workers: usize,
        /// Delays between lookups in DESCONOCIDO.
        #[arg(long, default_value = "2s,4s,8s,16s,32s")]
        check_schedule: String,
        /// Use this database instead of a throwaway SQLite file per world.
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: Option<String>,
        /// Print the report as JSON (no progress bars).
        #[arg(long)]
        json: bool,
        /// A worked example, printed beside the reference figures it is
        /// compared with: `a` (one buyer, 500 USD, one lost answer), `c`
        /// (1,000 orders), `new-key` (a new key on every retry); `a` and
        /// `new-key` ignore --orders and --loss.
        #[arg(long, value_enum)]
        scenario: Option<cobro::demo::Scenario>,
        /// `--gateway stripe --stripe-api-base URL`: the fleet through
        /// Stripe's API against that server instead of the three simulator
        /// worlds (STRIPE_SECRET_KEY; an http:// base goes through a lossy
        /// proxy that loses --loss of the answers).
        #[command(flatten)]
        gateway: cobro::gateway::GatewayChoice,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let quiet = matches!(cli.command, Command::Demo { .. });
    // The demo draws progress bars: only real problems may print over them
    // (SQLite lock waits make sqlx flag "slow statements", which are expected).
    cobro::runtime::init_tracing(if quiet { "warn,sqlx=error" } else { "info" });
    let runtime = tokio::runtime::Runtime::new().expect("start the tokio runtime");
    cobro::runtime::exit_code(runtime.block_on(cli::run::run(cli.command)))
}
