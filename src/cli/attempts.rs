//! `cobro attempts`: the operator view from a terminal, over
//! [`cobro::operator`]: every attempt, newest first, a page at a time
//! (`--cursor` with the cursor printed at the end), and `cobro attempts
//! show <id>` for one attempt with its history and lookups. Reads the
//! database directly, like every other command.

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use uuid::Uuid;

use cobro::operator::{self, Search};
use cobro::store::Store;

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct AttemptsArgs {
    #[command(subcommand)]
    command: Option<AttemptsCommand>,
    #[command(flatten)]
    search: SearchArgs,
}

#[derive(Subcommand)]
enum AttemptsCommand {
    /// One attempt: its facts, its full transition history and its lookups.
    Show {
        /// The database: `postgres://…` or `sqlite://path`.
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: Option<String>,
        /// The attempt's id.
        id: Uuid,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
struct SearchArgs {
    /// The database: `postgres://…` or `sqlite://path`.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// An order id (exact).
    #[arg(long = "order")]
    order_id: Option<String>,
    /// An idempotency key (exact).
    #[arg(long)]
    key: Option<String>,
    /// PENDIENTE, EN_PROCESO, DESCONOCIDO, APROBADO, RECHAZADO or EN_REVISION.
    #[arg(long)]
    state: Option<String>,
    /// initial, business_retry, refund, or charge (initial and business_retry).
    #[arg(long)]
    kind: Option<String>,
    /// Created at or after: RFC 3339, or a date (UTC).
    #[arg(long)]
    from: Option<String>,
    /// Created before: RFC 3339, or a date (the whole day included).
    #[arg(long)]
    to: Option<String>,
    /// Attempts per page (1 to 100; default 50).
    #[arg(long)]
    limit: Option<String>,
    /// The cursor printed at the end of the previous page.
    #[arg(long)]
    cursor: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

async fn connect(url: Option<String>) -> Result<Store> {
    let Some(url) = url else {
        bail!("DATABASE_URL (or --database-url) is required");
    };
    Ok(Store::connect(&url, 2).await?)
}

pub async fn run(args: AttemptsArgs) -> Result<()> {
    match args.command {
        Some(AttemptsCommand::Show {
            database_url,
            id,
            json,
        }) => show(&connect(database_url).await?, id, json).await,
        None => list(args.search).await,
    }
}

async fn list(a: SearchArgs) -> Result<()> {
    let store = connect(a.database_url).await?;
    let search = Search {
        order_id: a.order_id,
        key: a.key,
        state: a.state,
        kind: a.kind,
        from: a.from,
        to: a.to,
        cursor: a.cursor,
        limit: a.limit,
    };
    let page = operator::search(&store, &search).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&page)?);
        return Ok(());
    }
    if page.items.is_empty() {
        println!("no attempt matches");
    }
    for a in &page.items {
        println!(
            "{}  {}  {:<14} #{}  {:<11}  {} {}  order {}  key {}  sends {} checks {}",
            a.created_at.format("%Y-%m-%dT%H:%M:%S%.3fZ"),
            a.id,
            a.kind,
            a.attempt_number,
            a.state,
            cobro::domain::decimal(a.amount_minor, &a.currency),
            a.currency,
            a.order_id,
            a.idempotency_key,
            a.send_count,
            a.check_count,
        );
    }
    if let Some(next) = &page.next_cursor {
        println!("next page: --cursor {next}");
    }
    Ok(())
}

async fn show(store: &Store, id: Uuid, json: bool) -> Result<()> {
    let d = cobro::finance::detail(store, id)
        .await
        .with_context(|| format!("reading attempt {id}"))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&d)?);
        return Ok(());
    }
    super::print_status(store, std::slice::from_ref(&d.attempt), false).await?;
    if d.checks.is_empty() {
        println!("  no lookups");
    }
    for c in &d.checks {
        println!(
            "  lookup #{}  due {}  ran {}  {:<10} HTTP {}  {}",
            c.check_number,
            c.scheduled_at.format("%Y-%m-%dT%H:%M:%S%.3fZ"),
            c.started_at.format("%Y-%m-%dT%H:%M:%S%.3fZ"),
            c.lookup_result,
            c.http_status.map_or("-".into(), |s| s.to_string()),
            c.actor,
        );
    }
    Ok(())
}
