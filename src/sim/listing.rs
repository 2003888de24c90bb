//! The simulator's listing endpoints, for reconciliation: `GET /v1/charges` and
//! `GET /v1/refunds` with `from` and `to` (RFC 3339, half-open `[from, to)` on each entry's
//! execution time `at`; either may be left out), `limit` (1-1000, default 100) and
//! `starting_after` (the last id of the previous page). Answer: [`ListPage`].
//!
//! Invariant: a listing only reads the books. Entries come in `seq` order, filtered by `at`,
//! and each page starts right after its cursor, so walking the pages yields every matching
//! entry exactly once. Rate limit, outage and latency apply as to the payment endpoints; no
//! dice are drawn, so listing never shifts the seeded faults.

use axum::{
    Json,
    extract::{Query, State},
    response::{IntoResponse, Response},
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tracing::debug;

use super::{
    books::Books,
    ledger::{LedgerEntry, ListPage, RefundEntry},
    limit::{throttle, too_many_requests},
    parse::{Invalid, invalid},
    server::{AppState, bad_request, unavailable},
};

/// Entries per page when `limit` is not given.
pub const DEFAULT_LIST_LIMIT: usize = 100;
/// The largest `limit` accepted.
pub const MAX_LIST_LIMIT: usize = 1000;

/// The query string as sent; parsed by [`bounds`] so that every mistake names its field.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ListQuery {
    from: Option<String>,
    to: Option<String>,
    limit: Option<String>,
    starting_after: Option<String>,
}

/// A parsed listing request.
#[derive(Debug)]
struct Bounds {
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
    limit: usize,
    after: Option<String>,
}

impl Bounds {
    fn contains(&self, at: DateTime<Utc>) -> bool {
        self.from.is_none_or(|f| at >= f) && self.to.is_none_or(|t| at < t)
    }
}

/// What a listing page holds.
trait Listable: Clone + Serialize {
    fn id(&self) -> &str;
    fn at(&self) -> DateTime<Utc>;
}

impl Listable for LedgerEntry {
    fn id(&self) -> &str {
        &self.charge_id
    }
    fn at(&self) -> DateTime<Utc> {
        self.at
    }
}

impl Listable for RefundEntry {
    fn id(&self) -> &str {
        &self.refund_id
    }
    fn at(&self) -> DateTime<Utc> {
        self.at
    }
}

pub(crate) async fn list_charges(
    State(app): State<AppState>,
    Query(q): Query<ListQuery>,
) -> Response {
    list(&app, "/v1/charges", q, Books::charges).await
}

pub(crate) async fn list_refunds(
    State(app): State<AppState>,
    Query(q): Query<ListQuery>,
) -> Response {
    list(&app, "/v1/refunds", q, Books::refunds).await
}

async fn list<E: Listable>(
    app: &AppState,
    path: &str,
    q: ListQuery,
    entries: fn(&Books) -> &[E],
) -> Response {
    let (throttled, outage, latency) = app.with(|s| {
        s.books.stats_mut().list_requests += 1;
        let throttled = throttle(s, std::time::Instant::now());
        (throttled, s.faults.outage, s.faults.latency())
    });
    if let Some(retry_after) = throttled {
        debug!(path, retry_after, "sim: list -> 429 (rate limit)");
        return too_many_requests(retry_after);
    }
    if outage {
        debug!(path, "sim: list -> 503 (outage)");
        return unavailable();
    }
    if let Some(latency) = latency {
        tokio::time::sleep(latency).await;
    }
    let listed = bounds(q).and_then(|b| app.with(|s| page(entries(&s.books), &b)));
    match listed {
        Ok(p) => {
            debug!(
                path,
                n = p.data.len(),
                has_more = p.has_more,
                "sim: list -> 200"
            );
            Json(p).into_response()
        }
        Err(e) => bad_request(e.field, &e.message),
    }
}

fn bounds(q: ListQuery) -> Result<Bounds, Invalid> {
    let time = |field: &'static str, raw: Option<String>| {
        raw.map(|s| {
            DateTime::parse_from_rfc3339(s.trim())
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| invalid(field, format!("{field} must be an RFC 3339 time: {e}")))
        })
        .transpose()
    };
    let limit = match q.limit {
        None => DEFAULT_LIST_LIMIT,
        Some(raw) => match raw.trim().parse::<usize>() {
            Ok(n) if (1..=MAX_LIST_LIMIT).contains(&n) => n,
            _ => {
                return Err(invalid(
                    "limit",
                    format!("limit must be an integer from 1 to {MAX_LIST_LIMIT}"),
                ));
            }
        },
    };
    Ok(Bounds {
        from: time("from", q.from)?,
        to: time("to", q.to)?,
        limit,
        after: q.starting_after.filter(|s| !s.is_empty()),
    })
}

/// One page: up to `limit` entries in the window, after the cursor.
fn page<E: Listable>(entries: &[E], b: &Bounds) -> Result<ListPage<E>, Invalid> {
    let start = match &b.after {
        None => 0,
        Some(id) => entries
            .iter()
            .position(|e| e.id() == id)
            .map(|i| i + 1)
            .ok_or_else(|| invalid("starting_after", format!("no entry with id {id:?}")))?,
    };
    let mut matching = entries.iter().skip(start).filter(|e| b.contains(e.at()));
    let data: Vec<E> = matching.by_ref().take(b.limit).cloned().collect();
    let has_more = matching.next().is_some();
    Ok(ListPage { data, has_more })
}
