//! The daily summary for finance: counts and amounts by state, the queue by
//! age, the oldest items. Read-only (seed 003: the "read-only summary" an
//! agent may prepare; it creates nothing).
//!
//! Invariant: deterministic: the same database and the same `generated_at`
//! give the same text and JSON, byte for byte (every list has a total order).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::domain::decimal;
use crate::store::{QueueQuery, Store, StoreError};

/// Finance's daily summary: every attempt by state, the escalation queue,
/// its oldest items, the open cases and the settled charges.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Summary {
    pub generated_at: DateTime<Utc>,
    pub stale_after_secs: u64,
    /// Every attempt, per (state, kind, currency).
    pub totals: Vec<Line>,
    /// The escalation queue: per reason, per age bucket, per currency.
    pub queue: Queue,
    /// The ten oldest items of the queue.
    pub oldest: Vec<Item>,
    /// Reconciliation cases not yet resolved.
    pub open_cases: usize,
    /// Settled charges per currency (the settlement check's record).
    pub settled: Vec<SettledLine>,
}

/// Settled charges of one currency: gross, the gateway's fees, net.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SettledLine {
    pub currency: String,
    pub count: i64,
    pub gross_minor: i64,
    pub fee_minor: i64,
    pub net_minor: i64,
    /// The same, as decimals in the currency's scale.
    pub gross: String,
    pub fee: String,
    pub net: String,
}

/// Every attempt of one state, kind and currency: how many, how much.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[schema(as = SummaryLine)]
pub struct Line {
    pub state: String,
    pub kind: String,
    pub currency: String,
    pub count: i64,
    /// The exact sum (JSON keeps it an exact integer, whatever its size).
    pub amount_minor: i128,
    /// The amount as a decimal in the currency's scale.
    pub amount: String,
}

/// The escalation queue in numbers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[schema(as = SummaryQueue)]
pub struct Queue {
    pub en_revision: usize,
    pub stale_desconocido: usize,
    /// `< 1 h`, `1-24 h`, `1-7 d`, `> 7 d`: items per bucket (all four listed).
    pub by_age: Vec<(String, usize)>,
    /// Amount in the queue per currency.
    pub amounts: Vec<(String, String)>,
}

/// One item of the queue, as the summary lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[schema(as = SummaryItem)]
pub struct Item {
    pub attempt_id: uuid::Uuid,
    pub order_id: String,
    pub kind: String,
    pub state: String,
    pub amount: String,
    pub currency: String,
    pub age_secs: i64,
    pub checks: i32,
}

const BUCKETS: [(&str, i64); 4] = [
    ("< 1 h", 3_600),
    ("1-24 h", 86_400),
    ("1-7 d", 7 * 86_400),
    ("> 7 d", i64::MAX),
];

pub async fn summarize(
    store: &Store,
    stale_after: Duration,
    generated_at: DateTime<Utc>,
) -> Result<Summary, StoreError> {
    let totals = store
        .totals_by_state()
        .await?
        .into_iter()
        .map(|t| Line {
            amount: decimal(t.amount_minor, &t.currency),
            state: t.state,
            kind: t.kind,
            currency: t.currency,
            count: t.count,
            amount_minor: t.amount_minor,
        })
        .collect();
    let mut by_age = vec![0usize; BUCKETS.len()];
    // i128: a sum of amounts never overflows (each is at most 10^12 - 1).
    let mut amounts: BTreeMap<String, i128> = BTreeMap::new();
    let (mut queued, mut en_revision) = (0usize, 0usize);
    let mut oldest = Vec::new();
    // The whole queue, page by page: no cap, and only a page in memory.
    let everything = QueueQuery {
        stale_after,
        ..QueueQuery::default()
    };
    super::for_each_page(store, &everything, |page| {
        for e in page {
            let bucket = BUCKETS
                .iter()
                .position(|(_, below)| e.age_secs < *below)
                .unwrap_or(BUCKETS.len() - 1);
            by_age[bucket] += 1;
            *amounts.entry(e.attempt.currency.clone()).or_default() +=
                i128::from(e.attempt.amount_minor);
            queued += 1;
            en_revision += usize::from(e.reason() == "en_revision");
            if oldest.len() < 10 {
                oldest.push(e);
            }
        }
    })
    .await?;
    let open_cases = usize::try_from(store.open_cases_count().await?).unwrap_or(usize::MAX);
    let oldest = oldest
        .iter()
        .map(|e| Item {
            attempt_id: e.attempt.id,
            order_id: e.attempt.order_id.clone(),
            kind: if e.attempt.is_refund() {
                "refund"
            } else {
                "charge"
            }
            .into(),
            state: e.attempt.state.to_string(),
            amount: decimal(e.attempt.amount_minor, &e.attempt.currency),
            currency: e.attempt.currency.clone(),
            age_secs: e.age_secs,
            checks: e.attempt.check_count,
        })
        .collect();
    Ok(Summary {
        generated_at,
        stale_after_secs: stale_after.as_secs(),
        totals,
        queue: Queue {
            en_revision,
            stale_desconocido: queued - en_revision,
            by_age: BUCKETS
                .iter()
                .zip(by_age)
                .map(|((label, _), n)| ((*label).to_owned(), n))
                .collect(),
            amounts: amounts
                .into_iter()
                .map(|(c, minor)| {
                    let shown = decimal(minor, &c);
                    (c, shown)
                })
                .collect(),
        },
        oldest,
        open_cases,
        settled: store
            .settlement_totals()
            .await?
            .into_iter()
            .map(|t| SettledLine {
                gross: decimal(t.gross_minor, &t.currency),
                fee: decimal(t.fee_minor, &t.currency),
                net: decimal(t.net_minor, &t.currency),
                currency: t.currency,
                count: t.count,
                gross_minor: t.gross_minor,
                fee_minor: t.fee_minor,
                net_minor: t.net_minor,
            })
            .collect(),
    })
}

impl Summary {
    /// The summary as plain text (for a terminal, a chat message or a mail).
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "cobro daily summary, {}",
            self.generated_at.format("%Y-%m-%dT%H:%M:%SZ")
        );
        let _ = writeln!(
            out,
            "\nEscalation queue: {} in EN_REVISION, {} DESCONOCIDO for more than {} s",
            self.queue.en_revision, self.queue.stale_desconocido, self.stale_after_secs
        );
        let _ = writeln!(out, "  open reconciliation cases: {}", self.open_cases);
        for (label, n) in &self.queue.by_age {
            let _ = writeln!(out, "  {label:>7}  {n}");
        }
        for (currency, amount) in &self.queue.amounts {
            let _ = writeln!(out, "  in the queue: {amount} {currency}");
        }
        if !self.oldest.is_empty() {
            let _ = writeln!(out, "\nOldest items:");
        }
        for i in &self.oldest {
            let _ = writeln!(
                out,
                "  {}  {:<11} {:<6} order {}  {} {}  {} h old, {} checks",
                i.attempt_id,
                i.state,
                i.kind,
                i.order_id,
                i.amount,
                i.currency,
                i.age_secs / 3600,
                i.checks
            );
        }
        let _ = writeln!(out, "\nAll attempts by state:");
        for l in &self.totals {
            let _ = writeln!(
                out,
                "  {:<11} {:<6} {}  {:>7} attempts  {:>16}",
                l.state, l.kind, l.currency, l.count, l.amount
            );
        }
        if !self.settled.is_empty() {
            let _ = writeln!(out, "\nSettled at the gateway (gross - fee = net):");
        }
        for l in &self.settled {
            let _ = writeln!(
                out,
                "  {:>7} charges  {} {} - {} {} = {} {}",
                l.count, l.gross, l.currency, l.fee, l.currency, l.net, l.currency
            );
        }
        out
    }
}
