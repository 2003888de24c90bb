//! `cobro escalations`: finance's queue from a terminal (list, show,
//! resolve, check-now, resolve-case, summary), over [`cobro::finance`].

use anyhow::Result;
use clap::Subcommand;
use uuid::Uuid;

use cobro::store::Store;

#[derive(Subcommand)]
pub enum EscalationCommand {
    /// The queue, oldest first, a page at a time (`--limit`, then `--after`
    /// with the cursor printed at the end); `--all` (or `--csv`) prints
    /// every page.
    List {
        #[command(flatten)]
        filter: FilterArgs,
        /// Items per page (at most 500).
        #[arg(long, default_value_t = cobro::finance::DEFAULT_PAGE_SIZE)]
        limit: u32,
        /// The `next` cursor of the previous page.
        #[arg(long, conflicts_with = "all")]
        after: Option<String>,
        /// Every page at once.
        #[arg(long)]
        all: bool,
        /// Print JSON instead of text.
        #[arg(long, conflicts_with = "csv")]
        json: bool,
        /// CSV for a spreadsheet (decimal amounts, ISO timestamps).
        #[arg(long)]
        csv: bool,
    },
    /// One attempt with its evidence and full history.
    Show {
        /// The attempt's id.
        #[arg(long)]
        attempt: Uuid,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Resolve an attempt: approve (with the gateway's charge id), decline
    /// (with a code) or check again now. Give the version you looked at:
    /// if the attempt moved since, nothing is written.
    Resolve {
        /// The attempt's id.
        #[arg(long)]
        attempt: Uuid,
        /// The attempt's version as shown by `list` or `show`.
        #[arg(long)]
        version: i64,
        #[arg(long = "as", value_enum)]
        action: Action,
        /// For `approve`: the gateway's charge (or refund) id.
        #[arg(long, required_if_eq("action", "approve"))]
        charge_id: Option<String>,
        /// For `decline`: the decline code to record.
        #[arg(long, required_if_eq("action", "decline"))]
        code: Option<String>,
        /// Your name (kept in the transition log as finance:<name>).
        #[arg(long)]
        by: String,
        /// What you checked and why.
        #[arg(long)]
        note: String,
    },
    /// Check again now: every attempt in EN_REVISION the filters select is
    /// looked up at the gateway now instead of at its next automatic check
    /// (DESCONOCIDO ones keep their own schedule). Prints how many.
    CheckNow {
        #[command(flatten)]
        filter: FilterArgs,
        /// Your name (kept in the transition log as finance:<name>).
        #[arg(long, alias = "actor")]
        by: String,
        /// Why (e.g. "the gateway's incident is over").
        #[arg(long)]
        note: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Close a reconciliation case (after acting on it), with a note.
    ResolveCase {
        #[arg(long = "case")]
        case_id: i64,
        /// Your name (kept as finance:<name>).
        #[arg(long)]
        by: String,
        /// What you did about it.
        #[arg(long)]
        note: String,
    },
    /// Refund a charge the gateway made twice (a double_charge case): a
    /// refund attempt against the duplicate's gateway id, approved by you.
    /// Asking again returns the same refund.
    RefundDuplicate {
        #[arg(long = "case")]
        case_id: i64,
        /// The duplicate's gateway id, as the case lists it.
        #[arg(long)]
        charge: String,
        /// Your name: who approved it (kept as finance:<name>).
        #[arg(long)]
        by: String,
    },
    /// The daily summary: counts and amounts by state and age, oldest items.
    Summary {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Action {
    Approve,
    Decline,
    Check,
}

#[derive(clap::Args)]
pub struct FilterArgs {
    /// EN_REVISION or DESCONOCIDO.
    #[arg(long)]
    pub state: Option<String>,
    /// Only attempts in this currency (ISO 4217 code, e.g. USD).
    #[arg(long)]
    pub currency: Option<String>,
    /// charge or refund.
    #[arg(long)]
    pub kind: Option<String>,
    /// Only items at least this old (e.g. 2h).
    #[arg(long, value_parser = cobro::backoff::parse_duration_arg)]
    pub older_than: Option<std::time::Duration>,
}

impl FilterArgs {
    fn filter(self) -> cobro::finance::Filter {
        cobro::finance::Filter {
            state: self.state,
            currency: self.currency,
            kind: self.kind,
            min_age_secs: self.older_than.map(|d| d.as_secs() as i64),
        }
    }
}

pub async fn run(
    store: &Store,
    stale_after: std::time::Duration,
    command: EscalationCommand,
) -> Result<()> {
    use cobro::finance;
    match command {
        EscalationCommand::List {
            filter,
            limit,
            after,
            all,
            json,
            csv,
        } => {
            let filter = filter.filter();
            let (items, total, next) = if all || csv {
                let items = finance::queue(store, stale_after, &filter).await?;
                let total = items.len() as i64;
                (items, total, None)
            } else {
                let page = finance::PageRequest {
                    after,
                    limit: Some(limit),
                };
                let p = finance::queue_page(store, stale_after, &filter, &page).await?;
                (p.items, p.total, p.next)
            };
            let cases = finance::open_cases(store).await?;
            if csv {
                print!("{}", finance::to_csv(&items));
            } else if json {
                let both = serde_json::json!({
                    "items": items, "total": total, "next": next, "cases": cases
                });
                println!("{}", serde_json::to_string_pretty(&both)?);
            } else if items.is_empty() && cases.is_empty() {
                println!("nothing needs finance");
            } else {
                for c in &cases {
                    println!(
                        "case {}  {:<18} order {}  gateway {}  opened {}  {}",
                        c.id,
                        c.kind,
                        c.order_id.as_deref().unwrap_or("-"),
                        c.gateway_ref.as_deref().unwrap_or("-"),
                        c.opened_at.format("%Y-%m-%dT%H:%M:%SZ"),
                        c.details
                    );
                }
                for e in &items {
                    let a = &e.attempt;
                    let (status, kind, lookup) = finance::last_evidence(a);
                    println!(
                        "{}  v{}  {:<11} {:<6} order {}  {} {}  {} min old  {} checks  next check {}  last: {} {} {}",
                        a.id,
                        a.version,
                        a.state,
                        if a.is_refund() { "refund" } else { "charge" },
                        a.order_id,
                        cobro::domain::decimal(a.amount_minor, &a.currency),
                        a.currency,
                        e.age_secs / 60,
                        a.check_count,
                        e.next_check_at
                            .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
                            .unwrap_or_else(|| "none".into()),
                        status.map(|s| s.to_string()).unwrap_or_else(|| "-".into()),
                        kind.unwrap_or_else(|| "-".into()),
                        lookup.unwrap_or_else(|| "-".into()),
                    );
                }
                println!("{} item(s) in all, {} shown", total, items.len());
                if let Some(next) = next {
                    println!("next page: --after {next}");
                }
            }
        }
        EscalationCommand::CheckNow {
            filter,
            by,
            note,
            json,
        } => {
            let done =
                finance::check_now_all(store, stale_after, &filter.filter(), &by, &note).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&done)?);
            } else {
                println!(
                    "scheduled {} attempt(s) in review for a lookup now; {} being looked up already, {} changed meanwhile, {} DESCONOCIDO left on their own schedule",
                    done.scheduled, done.busy, done.moved, done.skipped_desconocido
                );
            }
        }
        EscalationCommand::Show { attempt, json } => {
            if json {
                let d = finance::detail(store, attempt).await?;
                println!("{}", serde_json::to_string_pretty(&d)?);
            } else {
                let (a, _) = store.load(attempt).await?;
                super::print_status(store, &[a], false).await?;
            }
        }
        EscalationCommand::Resolve {
            attempt,
            version,
            action,
            charge_id,
            code,
            by,
            note,
        } => {
            let resolution = match action {
                Action::Approve => finance::Resolution::Approve {
                    charge_id: charge_id.unwrap_or_default(),
                },
                Action::Decline => finance::Resolution::Decline {
                    code: code.unwrap_or_default(),
                },
                Action::Check => finance::Resolution::CheckNow,
            };
            let req = finance::ResolveRequest {
                attempt_id: attempt,
                version,
                resolution,
                by: &by,
                note: &note,
            };
            let declining = matches!(req.resolution, finance::Resolution::Decline { .. });
            let now = finance::resolve(store, &req).await?;
            if declining && now.state == cobro::state::State::EnRevision {
                let how = match now.gateway_ref.as_deref() {
                    Some(object) => {
                        format!("a worker cancels {object} at the gateway, then records")
                    }
                    None => "a worker looks it up at the gateway, and records".into(),
                };
                println!(
                    "decline requested: {how} attempt {} as RECHAZADO once the gateway says it is \
                     final (or has no record of it long after its last send), or what the gateway \
                     says instead; `cobro escalations show --attempt {}` shows it",
                    now.id, now.id
                );
            } else {
                println!(
                    "attempt {} is now {} (version {})",
                    now.id, now.state, now.version
                );
            }
        }
        EscalationCommand::ResolveCase { case_id, by, note } => {
            let case = finance::resolve_case(store, case_id, &by, &note).await?;
            println!(
                "case {} closed by {}",
                case.id,
                case.resolved_by.unwrap_or_default()
            );
        }
        EscalationCommand::RefundDuplicate {
            case_id,
            charge,
            by,
        } => {
            let r = store.refund_duplicate(case_id, &charge, &by).await?;
            let what = if r.created {
                "asked for"
            } else {
                "already asked for"
            };
            println!(
                "refund {} of duplicate {charge} {what} (key {}, {})",
                r.refund_id, r.idempotency_key, r.state
            );
        }
        EscalationCommand::Summary { json } => {
            let now = chrono::Utc::now();
            let summary = finance::summarize(store, stale_after, now).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&summary)?);
            } else {
                print!("{}", summary.to_text());
            }
        }
    }
    Ok(())
}
