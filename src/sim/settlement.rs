//! The simulator's settlement, in Stripe's shape: `GET /v1/balance_transactions` (also
//! served as `/v1/balance/history`, Stripe's older path) lists one balance transaction of
//! type `charge` per approved charge (gross, fee, net, `status: "available"`, `source`:
//! the charge id), with `created[gte]`/`created[lt]` (Unix seconds), `payout` (the lines a
//! payout carried), `limit` (1-100) and `starting_after`; `GET /v1/payouts` lists the
//! payouts, all automatic; `POST /control/payout` pays out every settled line not paid out
//! yet, one payout per currency (a test and demo facility, as `/control/inject`).
//!
//! Faults (in [`Faults`], set like the others, deterministic, no dice drawn): the fee is
//! `settle_fee_bps` of the gross plus `settle_fee_fixed_minor`; every `unsettled_every`-th
//! approved charge (by its sequence number) is never settled; every `fee_off_every`-th
//! gets `fee_off_minor` more fee; each payout's amount is off by `payout_off_minor`.
//!
//! Invariant: listing only reads; lines are derived from the books and the faults, in
//! sequence order, so walking the pages yields each line once; a line's net is always
//! gross − fee. The rate limit and the outage apply as to every listing.

use std::collections::HashMap;

use axum::{
    Json,
    extract::{Query, State},
    response::{IntoResponse, Response},
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{
    faults::Faults,
    ledger::LedgerEntry,
    limit::{throttle, too_many_requests},
    parse::{Invalid, invalid},
    server::{AppState, Inner, bad_request, unavailable},
};

/// Objects per page when `limit` is not given, and the most accepted (Stripe's).
const MAX_LIMIT: usize = 100;

/// The payouts made so far, and which line each carried.
#[derive(Debug, Default)]
pub(crate) struct Payouts {
    made: Vec<Payout>,
    carried: HashMap<String, String>,
}

impl Payouts {
    pub(crate) fn reset(&mut self) {
        *self = Payouts::default();
    }
}

#[derive(Debug, Clone, Serialize)]
struct Payout {
    id: String,
    object: &'static str,
    amount: i64,
    currency: String,
    status: &'static str,
    automatic: bool,
    created: i64,
}

#[derive(Debug, Clone, Serialize)]
struct Txn {
    id: String,
    object: &'static str,
    #[serde(rename = "type")]
    kind: &'static str,
    amount: i64,
    fee: i64,
    net: i64,
    currency: String,
    source: String,
    status: &'static str,
    created: i64,
    available_on: i64,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct TxnQuery {
    #[serde(rename = "created[gte]")]
    gte: Option<String>,
    #[serde(rename = "created[lt]")]
    lt: Option<String>,
    payout: Option<String>,
    limit: Option<String>,
    starting_after: Option<String>,
    /// Accepted and ignored: `source` is always the charge id here.
    #[serde(rename = "expand[]")]
    #[allow(dead_code)]
    expand: Option<String>,
}

/// The balance transaction of an approved charge, `None` when the faults say it is never
/// settled.
fn txn(f: &Faults, e: &LedgerEntry) -> Option<Txn> {
    let nth = |every: u64| every > 0 && e.seq.is_multiple_of(every);
    if e.status != "approved" || nth(f.unsettled_every) {
        return None;
    }
    let pct = (i128::from(e.amount_minor) * i128::from(f.settle_fee_bps) + 5_000) / 10_000;
    let mut fee = i64::try_from(pct)
        .unwrap_or(i64::MAX)
        .saturating_add(f.settle_fee_fixed_minor);
    if nth(f.fee_off_every) {
        fee = fee.saturating_add(f.fee_off_minor);
    }
    let created = e.at.timestamp();
    Some(Txn {
        id: format!("txn_{}", e.charge_id),
        object: "balance_transaction",
        kind: "charge",
        amount: e.amount_minor,
        fee,
        net: e.amount_minor.saturating_sub(fee),
        currency: e.currency.to_ascii_lowercase(),
        source: e.charge_id.clone(),
        status: "available",
        created,
        available_on: created,
    })
}

fn secs(field: &'static str, raw: Option<String>) -> Result<Option<i64>, Invalid> {
    raw.map(|s| {
        s.trim()
            .parse::<i64>()
            .map_err(|_| invalid(field, format!("{field} must be Unix seconds")))
    })
    .transpose()
}

/// `created[gte]`, `created[lt]` and `limit`, each mistake naming its field.
fn bounds(q: &mut TxnQuery) -> Result<(Option<i64>, Option<i64>, usize), Invalid> {
    let limit = match q.limit.take() {
        None => MAX_LIMIT,
        Some(r) => match r.trim().parse::<usize>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
            _ => {
                return Err(invalid(
                    "limit",
                    format!("limit must be an integer from 1 to {MAX_LIMIT}"),
                ));
            }
        },
    };
    Ok((
        secs("created[gte]", q.gte.take())?,
        secs("created[lt]", q.lt.take())?,
        limit,
    ))
}

/// Rate limit and outage, as every listing.
fn admitted(app: &AppState) -> Option<Response> {
    let (throttled, outage) = app.with(|s| {
        s.books.stats_mut().list_requests += 1;
        (throttle(s, std::time::Instant::now()), s.faults.outage)
    });
    if let Some(retry_after) = throttled {
        return Some(too_many_requests(retry_after));
    }
    outage.then(unavailable)
}

/// One page of `items` (in order) after the cursor.
fn page<T: Serialize>(
    items: Vec<(String, T)>,
    after: Option<String>,
    limit: usize,
    url: &str,
) -> Response {
    let start = match after.filter(|a| !a.is_empty()) {
        None => 0,
        Some(a) => match items.iter().position(|(id, _)| *id == a) {
            Some(i) => i + 1,
            None => return bad_request("starting_after", &format!("no object with id {a:?}")),
        },
    };
    let rest: Vec<T> = items.into_iter().skip(start).map(|(_, t)| t).collect();
    let has_more = rest.len() > limit;
    let data: Vec<T> = rest.into_iter().take(limit).collect();
    Json(serde_json::json!({ "object": "list", "url": url, "data": data, "has_more": has_more }))
        .into_response()
}

pub(crate) async fn list_balance(
    State(app): State<AppState>,
    Query(q): Query<TxnQuery>,
) -> Response {
    let payout = q.payout.clone();
    listed(&app, q, "/v1/balance_transactions", |s, within| {
        s.books
            .charges()
            .iter()
            .filter_map(|e| txn(&s.faults, e))
            .filter(|t| within(t.created))
            .filter(|t| match &payout {
                None => true,
                Some(p) => s.payouts.carried.get(&t.id) == Some(p),
            })
            .map(|t| (t.id.clone(), t))
            .collect()
    })
}

pub(crate) async fn list_payouts(
    State(app): State<AppState>,
    Query(q): Query<TxnQuery>,
) -> Response {
    listed(&app, q, "/v1/payouts", |s, within| {
        s.payouts
            .made
            .iter()
            .filter(|p| within(p.created))
            .map(|p| (p.id.clone(), p.clone()))
            .collect()
    })
}

/// A listing: admitted (rate limit, outage), its query's bounds read, then
/// the page of what `select` picks within `created[gte]`/`created[lt]`.
fn listed<T: Serialize>(
    app: &AppState,
    mut q: TxnQuery,
    url: &str,
    select: impl FnOnce(&Inner, &dyn Fn(i64) -> bool) -> Vec<(String, T)>,
) -> Response {
    if let Some(refused) = admitted(app) {
        return refused;
    }
    let (gte, lt, limit) = match bounds(&mut q) {
        Ok(b) => b,
        Err(e) => return bad_request(e.field, &e.message),
    };
    let within = |at: i64| gte.is_none_or(|g| at >= g) && lt.is_none_or(|l| at < l);
    let items = app.with(|s| select(s, &within));
    page(items, q.starting_after, limit, url)
}

/// `POST /control/payout`: pays out every settled line not paid out yet, one payout per
/// currency, created now. Answer: the payouts made.
pub(crate) async fn pay_out(State(app): State<AppState>) -> Response {
    let now: DateTime<Utc> = Utc::now();
    let made = app.with(|s| {
        let mut per_currency: std::collections::BTreeMap<String, Vec<Txn>> = Default::default();
        for t in s.books.charges().iter().filter_map(|e| txn(&s.faults, e)) {
            if !s.payouts.carried.contains_key(&t.id) {
                per_currency.entry(t.currency.clone()).or_default().push(t);
            }
        }
        let mut made = Vec::new();
        for (currency, lines) in per_currency {
            let n = s.payouts.made.len() + 1;
            let id = format!("po_{n:06}");
            let net: i64 = lines.iter().map(|t| t.net).sum();
            for t in &lines {
                s.payouts.carried.insert(t.id.clone(), id.clone());
            }
            let p = Payout {
                id,
                object: "payout",
                amount: net.saturating_add(s.faults.payout_off_minor),
                currency,
                status: "paid",
                automatic: true,
                created: now.timestamp(),
            };
            s.payouts.made.push(p.clone());
            made.push(p);
        }
        made
    });
    Json(serde_json::json!({ "payouts": made })).into_response()
}
