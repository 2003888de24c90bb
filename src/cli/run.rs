//! What each `cobro` command does: the command line's shape is in
//! `main.rs`, the bulkier printouts in the sibling modules.

use anyhow::{Context, Result, bail};

use cobro::domain::{ChargeRequest, MaxAmount};
use cobro::store::Store;

use crate::Command;

/// Runs one command; its error is printed by `main`, without a backtrace.
pub(crate) async fn run(command: Command) -> Result<()> {
    match command {
        Command::Migrate {
            database_url,
            max_amount_minor,
        } => {
            let store = Store::connect(&database_url, 2).await?;
            let applied = store.migrate().await.context("migrating")?;
            for m in &applied {
                println!("applied {} {}", m.version, m.description);
            }
            if let Some(max) = max_amount_minor {
                store
                    .set_max_amount(max)
                    .await
                    .context("setting the maximum amount")?;
                println!("maximum amount_minor: {}", max.minor());
            }
            match applied.len() {
                0 => println!("database schema already up to date"),
                n => println!("database schema is up to date ({n} migration(s) applied)"),
            }
        }
        Command::Enqueue {
            database_url,
            order_id,
            amount_minor,
            currency,
            key,
            payment_method,
            customer,
            json,
        } => {
            // Parse before connecting: bad input never reaches the database.
            let req = ChargeRequest::parse_within(
                &order_id,
                amount_minor,
                &currency,
                key.as_deref(),
                payment_method.as_deref(),
                MaxAmount::CEILING,
            )?
            .with_customer(customer.as_deref())?;
            let store = Store::connect(&database_url, 2).await?;
            let out = store.enqueue(&req).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                let verb = if out.created {
                    "enqueued"
                } else {
                    "already enqueued"
                };
                println!(
                    "{verb}: attempt {} key {} state {}",
                    out.attempt_id, out.idempotency_key, out.state
                );
            }
        }
        Command::Status {
            database_url,
            order_id,
            attempt,
            json,
            watch,
            interval,
        } => {
            if watch && interval < super::watch::MIN_INTERVAL {
                bail!("--interval must be at least 100ms");
            }
            let store = Store::connect(&database_url, 2).await?;
            let query = super::watch::StatusQuery {
                order_id,
                attempt,
                json,
            };
            match watch {
                true => super::watch::watch(&store, &query, interval).await?,
                false => super::watch::status_once(&store, &query).await?,
            }
        }
        Command::Retry {
            database_url,
            attempt,
            actor,
            override_reason,
            caps,
            json,
        } => {
            let cap_override = override_reason
                .as_deref()
                .map(cobro::store::OverrideReason::parse)
                .transpose()?;
            let store = Store::connect(&database_url, 2).await?;
            let who = format!("manual:{actor}");
            let asked = store
                .request_retry(attempt, &who, caps.caps(), cap_override.as_ref())
                .await?;
            if let Some(reason) = &asked.cap_override {
                tracing::warn!(%attempt, actor = %who, cap_override = %reason,
                    "the card networks' caps overridden for a manual retry");
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&asked)?);
            } else {
                println!(
                    "retry requested: a worker looks attempt {} up at the gateway now, then creates attempt number {} with key {} (cobro status --order {} shows it)",
                    asked.retry_of, asked.attempt_number, asked.idempotency_key, asked.order_id
                );
            }
        }
        Command::Refund {
            database_url,
            attempt,
            amount_minor,
            key,
            actor,
            json,
        } => {
            // Parse before connecting: bad input never reaches the database.
            let amount = cobro::domain::Amount::parse(amount_minor)?;
            let key = match key {
                Some(k) => cobro::domain::IdempotencyKey::parse(&k)?,
                None => cobro::domain::IdempotencyKey::generate(),
            };
            let store = Store::connect(&database_url, 2).await?;
            let refund = store.request_refund(attempt, amount, key, &actor).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&refund)?);
            } else {
                let verb = if refund.created {
                    "refund requested"
                } else {
                    "already requested"
                };
                println!(
                    "{verb}: refund {} key {} state {}",
                    refund.refund_id, refund.idempotency_key, refund.state
                );
            }
        }
        Command::Cancel {
            database_url,
            order,
            reason,
            actor,
            json,
        } => {
            let store = Store::connect(&database_url, 2).await?;
            let done = store.cancel_order(&order, reason, &actor).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&done)?);
            } else {
                println!(
                    "order {}: {} unsent attempt(s) cancelled, {} scheduled retry(ies) stopped ({})",
                    done.order_id,
                    done.attempts_cancelled.len(),
                    done.retries_stopped.len(),
                    reason.as_str()
                );
            }
        }
        Command::Pause {
            database_url,
            reason,
            actor,
        } => {
            let store = Store::connect(&database_url, 2).await?;
            let s = store
                .set_sending_paused(true, &actor, Some(&reason))
                .await?;
            println!(
                "sending paused by {} at {}",
                s.changed_by,
                s.changed_at.format("%Y-%m-%dT%H:%M:%SZ")
            );
        }
        Command::Resume {
            database_url,
            actor,
        } => {
            let store = Store::connect(&database_url, 2).await?;
            let s = store.set_sending_paused(false, &actor, None).await?;
            println!(
                "sending resumed by {} at {}",
                s.changed_by,
                s.changed_at.format("%Y-%m-%dT%H:%M:%SZ")
            );
        }
        Command::PaymentMethod {
            database_url,
            order,
            token,
            actor,
        } => {
            let token = cobro::domain::PaymentMethod::parse(&token)
                .map_err(|e| anyhow::anyhow!("--token: {}", e.reason))?;
            let store = Store::connect(&database_url, 2).await?;
            let done = store.update_payment_method(&order, &token, &actor).await?;
            println!("{}", serde_json::to_string_pretty(&done)?);
        }
        Command::Notices {
            database_url,
            all,
            ack,
            by,
            json,
        } => {
            let store = Store::connect(&database_url, 2).await?;
            if let Some(id) = ack {
                let who = by.unwrap_or_default();
                if !store.ack_notice(id, &who).await? {
                    bail!("notice {id} does not exist or was already acknowledged");
                }
                println!("notice {id} acknowledged by {who}");
                return Ok(());
            }
            let notices = store.notices(!all).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&notices)?);
            } else {
                for n in &notices {
                    let delivery = match (n.delivered_at, n.failed_at) {
                        (Some(_), _) => "delivered".to_owned(),
                        (_, Some(_)) => {
                            format!("delivery failed after {} tries", n.delivery_attempts)
                        }
                        _ if n.delivery_attempts > 0 => format!("{} tries", n.delivery_attempts),
                        _ => String::new(),
                    };
                    println!(
                        "{:>6}  {}  order {}  {}  {}  {}  {delivery}",
                        n.id,
                        n.created_at.format("%Y-%m-%dT%H:%M:%SZ"),
                        n.order_id,
                        n.kind,
                        n.decline_code.as_deref().unwrap_or("-"),
                        n.next_retry_at
                            .map(|t| format!("next retry {}", t.format("%Y-%m-%dT%H:%M:%SZ")))
                            .unwrap_or_default()
                    );
                }
            }
        }
        Command::Escalations {
            database_url,
            stale_after,
            command,
        } => {
            let Some(url) = database_url else {
                bail!("DATABASE_URL (or --database-url) is required");
            };
            let store = Store::connect(&url, 2).await?;
            super::escalations::run(&store, stale_after, command).await?;
        }
        Command::Attempts(args) => super::attempts::run(args).await?,
        Command::Chaos(args) => {
            let outcome = cobro::chaos::run(&args).await?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&outcome)?);
            } else {
                print!("{}", cobro::chaos::render(&outcome));
            }
            if !outcome.report.passed() {
                std::process::exit(1);
            }
        }
        Command::Reconcile(cmd) => cobro::recon::run_command(cmd).await?,
        Command::ApiKey { name, scopes, json } => {
            let scopes = cobro::http::auth::parse_scopes(&scopes)
                .map_err(|e| anyhow::anyhow!("--scopes: {e}"))?;
            let (secret, entry) =
                cobro::http::auth::generate(&name, scopes).map_err(anyhow::Error::msg)?;
            if json {
                let out = serde_json::json!({"name": name, "secret": secret, "entry": entry});
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                println!("secret (give it to the caller; shown once, never stored): {secret}");
                println!("COBRO_API_KEYS entry (the secret's SHA-256): {entry}");
            }
        }
        Command::Openapi => {
            println!("{}", cobro::web::openapi_document());
        }
        Command::Reference { page } => {
            print!("{}", super::reference::render(&page));
        }
        Command::Serve(args) => {
            cobro::web::run(args, cobro::runtime::shutdown_signal()).await?;
        }
        Command::GatewaySim(args) => {
            let config = args.config().map_err(anyhow::Error::msg)?;
            let listener = tokio::net::TcpListener::bind(args.listen())
                .await
                .with_context(|| format!("binding {}", args.listen()))?;
            eprintln!(
                "gateway simulator listening on http://{}",
                listener.local_addr()?
            );
            let shutdown = cobro::runtime::shutdown_signal();
            match args.upstream() {
                Some(upstream) => {
                    eprintln!("proxy mode: /v1/ forwarded to {upstream}");
                    cobro::sim::serve_proxy(listener, config, upstream.clone(), shutdown).await?;
                }
                None => cobro::sim::serve(listener, config, shutdown).await?,
            }
        }
        Command::Demo {
            orders,
            loss,
            seed,
            workers,
            check_schedule,
            database_url,
            json,
            scenario,
            gateway,
        } => {
            let opts = cobro::demo::DemoOptions {
                orders,
                loss,
                seed,
                workers,
                database_url,
                check_schedule,
                gateway,
            };
            let bars = (!json).then(indicatif::MultiProgress::new);
            let report = match scenario {
                None => cobro::demo::run(&opts, bars.as_ref()).await?,
                Some(s) => cobro::demo::run_scenario(&opts, s, bars.as_ref()).await?,
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                println!("\n{}", cobro::demo::render(&report));
            }
        }
    }
    Ok(())
}
