//! `cobro status` once, or with `--watch` every `--interval` until Ctrl-C
//! or SIGTERM: on a terminal the screen is cleared and redrawn in place;
//! otherwise (a pipe, a file, a log) each snapshot is printed after the
//! last, separated by a blank line, so a reader sees whole snapshots.
//!
//! Invariant: the first snapshot's error ends the command (a wrong URL, a
//! missing schema); a later one is shown in place of the snapshot and the
//! watch goes on (a database restarting is what one watches for).

use std::io::{IsTerminal, Write};
use std::time::Duration;

use anyhow::{Result, bail};
use uuid::Uuid;

use cobro::store::Store;

/// The shortest `--interval`: each snapshot is a few queries.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// What `cobro status` shows.
pub struct StatusQuery {
    pub order_id: Option<String>,
    pub attempt: Option<Uuid>,
    pub json: bool,
}

/// One snapshot to stdout.
pub async fn status_once(store: &Store, q: &StatusQuery) -> Result<()> {
    let attempts = match (&q.order_id, q.attempt) {
        (Some(order), _) => store.attempts_for_order(order).await?,
        (None, Some(id)) => vec![store.load(id).await?.0],
        (None, None) => return super::print_system_status(store, q.json).await,
    };
    if attempts.is_empty() {
        bail!("no attempts found");
    }
    super::print_status(store, &attempts, q.json).await
}

/// Snapshots every `interval` until a shutdown signal.
pub async fn watch(store: &Store, q: &StatusQuery, interval: Duration) -> Result<()> {
    let tty = std::io::stdout().is_terminal();
    let stop = cobro::runtime::shutdown_signal();
    tokio::pin!(stop);
    let mut first = true;
    loop {
        if tty {
            // Cursor home, clear the screen: the next snapshot replaces it.
            print!("\x1b[H\x1b[2J");
        } else if !first {
            println!();
        }
        if tty {
            println!(
                "cobro status, every {} (Ctrl-C to stop)\n",
                shown_interval(interval)
            );
        }
        match status_once(store, q).await {
            Ok(()) => {}
            Err(e) if first => return Err(e),
            Err(e) => println!(
                "error: {e:#} (trying again in {})",
                shown_interval(interval)
            ),
        }
        std::io::stdout().flush()?;
        first = false;
        tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

fn shown_interval(d: Duration) -> String {
    match d.subsec_millis() {
        0 => format!("{} s", d.as_secs()),
        _ => format!("{:.1} s", d.as_secs_f64()),
    }
}
