//! Paging of what finance reads: the escalation queue and the open
//! reconciliation cases, each by its own keyset cursor, with a bounded
//! page size and the true total.
//!
//! Invariant: no list here returns more than [`MAX_PAGE_SIZE`] rows, except
//! [`queue`] and [`open_cases`] (the CLI's; the web process never calls
//! them) and [`for_each_page`], which holds one page at a time.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::Filter;
use crate::domain::InputError;
use crate::store::{CaseCursor, Escalated, QueueCursor, QueueQuery, ReconCase, Store, StoreError};

/// Items per page when none is asked for.
pub const DEFAULT_PAGE_SIZE: u32 = 50;
/// The largest page; a larger one asked for is refused, never cut silently.
pub const MAX_PAGE_SIZE: u32 = 500;

/// Which page of the queue: the `next` cursor of the previous page (none
/// for the first) and how many items.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct PageRequest {
    pub after: Option<String>,
    pub limit: Option<u32>,
}

/// One page of the queue.
#[derive(Debug, Clone, Serialize)]
pub struct QueuePage {
    /// Oldest first.
    pub items: Vec<Escalated>,
    /// Every item the filters select, on all pages (a SQL count).
    pub total: i64,
    /// The cursor of the next page; `None` on the last one.
    pub next: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error(transparent)]
    Invalid(#[from] InputError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A cursor as text: the attempt's `created_at` in microseconds since the
/// epoch and its id (`1767225600000000_<uuid>`).
pub fn encode_cursor(c: &QueueCursor) -> String {
    format!("{}_{}", c.created_at.timestamp_micros(), c.id)
}

/// A cursor's time: microseconds since the epoch, within years 1970 to
/// 9999. Outside that, PostgreSQL's timestamps would refuse it (a 503
/// for a forged cursor); no row cobro wrote is there.
fn cursor_time(micros: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    const YEAR_10000: i64 = 253_402_300_800_000_000;
    let m = micros.parse::<i64>().ok()?;
    if !(0..YEAR_10000).contains(&m) {
        return None;
    }
    chrono::DateTime::from_timestamp_micros(m)
}

/// A cursor made by [`encode_cursor`]; a bad one is refused naming `field`
/// (the parameter that carried it).
pub fn decode_cursor(s: &str, field: &'static str) -> Result<QueueCursor, InputError> {
    let bad = || InputError::new(field, "the `next` cursor of a previous page");
    let (micros, id) = s.trim().split_once('_').ok_or_else(bad)?;
    Ok(QueueCursor {
        created_at: cursor_time(micros).ok_or_else(bad)?,
        id: Uuid::try_parse(id).map_err(|_| bad())?,
    })
}

/// One page of the queue, filtered and paginated in SQL, oldest first,
/// with the true total.
pub async fn queue_page(
    store: &Store,
    stale_after: Duration,
    filter: &Filter,
    page: &PageRequest,
) -> Result<QueuePage, QueueError> {
    let q = filter.query(stale_after)?;
    let limit = page_size(page.limit, "limit")?;
    let after = match page.after.as_deref().filter(|a| !a.trim().is_empty()) {
        Some(a) => decode_cursor(a, "after")?,
        None => QueueCursor::start(),
    };
    // One more than asked tells whether a next page exists.
    let mut items = store
        .escalated_page(&q, after, i64::from(limit) + 1)
        .await?;
    let more = items.len() > limit as usize;
    items.truncate(limit as usize);
    let next = more
        .then(|| {
            items
                .last()
                .map(|e| encode_cursor(&QueueCursor::after(&e.attempt)))
        })
        .flatten();
    let total = store.escalated_count(&q).await?;
    Ok(QueuePage { items, total, next })
}

/// Visits every item `q` selects, page by page (no cap, bounded memory).
pub(crate) async fn for_each_page<F>(
    store: &Store,
    q: &QueueQuery,
    mut visit: F,
) -> Result<(), StoreError>
where
    F: FnMut(Vec<Escalated>),
{
    const PAGE: i64 = 1000;
    let mut after = QueueCursor::start();
    loop {
        let items = store.escalated_page(q, after, PAGE).await?;
        let Some(last) = items.last() else {
            return Ok(());
        };
        after = QueueCursor::after(&last.attempt);
        let full = items.len() as i64 == PAGE;
        visit(items);
        if !full {
            return Ok(());
        }
    }
}

/// Every item of the queue the filters select, oldest first, read in pages
/// (for the CSV export and the CLI: no cap).
pub async fn queue(
    store: &Store,
    stale_after: Duration,
    filter: &Filter,
) -> Result<Vec<Escalated>, QueueError> {
    let q = filter.query(stale_after)?;
    let mut all = Vec::new();
    for_each_page(store, &q, |items| all.extend(items)).await?;
    Ok(all)
}

/// One page of the open reconciliation cases.
#[derive(Debug, Clone, Serialize)]
pub struct CasesPage {
    /// Oldest first.
    pub items: Vec<ReconCase>,
    /// Every open case, on all pages (a SQL count).
    pub total: i64,
    /// The cursor of the next page; `None` on the last one.
    pub next: Option<String>,
}

/// Every open reconciliation case, oldest first: the CLI's list (no cap;
/// the web process pages them with [`cases_page`]).
pub async fn open_cases(store: &Store) -> Result<Vec<ReconCase>, StoreError> {
    store.open_cases().await
}

/// One page of the open reconciliation cases (`after`: the previous
/// page's `next`; a bad one is refused naming `field`), with their total.
pub async fn cases_page(
    store: &Store,
    page: &PageRequest,
    field: &'static str,
) -> Result<CasesPage, QueueError> {
    let limit = page_size(page.limit, "cases_limit")?;
    let after = match page.after.as_deref().filter(|a| !a.trim().is_empty()) {
        Some(a) => Some(decode_case_cursor(a, field)?),
        None => None,
    };
    let mut items = store.open_cases_page(after, i64::from(limit) + 1).await?;
    let more = items.len() > limit as usize;
    items.truncate(limit as usize);
    let next = more
        .then(|| items.last().map(CaseCursor::after))
        .flatten()
        .map(|c| format!("{}_{}", c.opened_at.timestamp_micros(), c.id));
    let total = store.open_cases_count().await?;
    Ok(CasesPage { items, total, next })
}

/// A case cursor as [`cases_page`] wrote it (`<opened_at µs>_<id>`).
fn decode_case_cursor(s: &str, field: &'static str) -> Result<CaseCursor, InputError> {
    let bad = || InputError::new(field, "the `cases_next` cursor of a previous page");
    let (micros, id) = s.trim().split_once('_').ok_or_else(bad)?;
    Ok(CaseCursor {
        opened_at: cursor_time(micros).ok_or_else(bad)?,
        id: id.parse().map_err(|_| bad())?,
    })
}

/// `limit` or the default, refused (naming `field`) outside 1 to
/// [`MAX_PAGE_SIZE`].
fn page_size(limit: Option<u32>, field: &'static str) -> Result<u32, InputError> {
    let limit = limit.unwrap_or(DEFAULT_PAGE_SIZE);
    if (1..=MAX_PAGE_SIZE).contains(&limit) {
        Ok(limit)
    } else {
        Err(InputError::new(
            field,
            format!("1 to {MAX_PAGE_SIZE} items per page"),
        ))
    }
}
