//! Finance's CSV export of the escalation queue, streamed a page at a
//! time so a large queue never sits in memory.

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;

use super::FinanceState;
use super::api::{db_failed, queue_error};
use crate::finance::{self, Filter};
use crate::store::{Escalated, QueueCursor, QueueQuery, Store};

/// Rows the CSV export reads from the database at a time.
const CSV_PAGE: i64 = 1000;

/// What the streamed CSV export still has to read.
struct Export {
    store: Store,
    q: QueueQuery,
    /// Where the next page starts; `None` once the last one was sent.
    next: Option<QueueCursor>,
    /// The first page, read before the response started.
    first: Option<Vec<Escalated>>,
}

impl Export {
    /// The next piece of the body: the rows of one page.
    async fn piece(mut self) -> Option<(std::io::Result<Bytes>, Self)> {
        let items = match self.first.take() {
            Some(items) => items,
            None => {
                let after = self.next?;
                match self.store.escalated_page(&self.q, after, CSV_PAGE).await {
                    Ok(items) => items,
                    Err(e) => {
                        // The status is sent: cutting the body short is
                        // how the client learns the export is incomplete.
                        tracing::warn!(error = %e, "CSV export stopped: the database failed");
                        self.next = None;
                        let cut = std::io::Error::other("the database failed mid-export");
                        return Some((Err(cut), self));
                    }
                }
            }
        };
        self.next = (items.len() as i64 == CSV_PAGE)
            .then(|| items.last().map(|e| QueueCursor::after(&e.attempt)))
            .flatten();
        Some((Ok(Bytes::from(finance::csv_rows(&items))), self))
    }
}

/// The queue as CSV, streamed: read from the database a page at a time by
/// its keyset cursor and written out as it goes, so the web process holds
/// one page whatever the queue's size. A bad filter is a 422 and an
/// unreachable database a 503 (the first page is read before answering).
#[utoipa::path(
    get,
    path = "/finance/escalations.csv",
    operation_id = "get_finance_escalations_csv",
    summary = "Escalation queue (CSV)",
    tag = "finance",
    description = "The escalation queue, with the same filters as the page, as CSV.",
    params(
        ("state" = Option<String>, Query, description = "EN_REVISION (in review) or DESCONOCIDO (in doubt)."),
        ("currency" = Option<String>, Query, description = "An ISO 4217 code, e.g. USD."),
        ("kind" = Option<String>, Query, description = "charge or refund."),
        ("min_age_secs" = Option<i64>, Query, description = "Only attempts at least this old, in seconds.")
    ),
    responses(
        (status = 200, description = "The queue as CSV.", content_type = "text/csv"),
        (status = 422, description = "A filter is malformed.", body = crate::web::openapi::ErrorBody),
        crate::web::openapi::Unavailable
    )
)]
pub(in crate::web) async fn csv(
    State(fin): FinanceState,
    Query(filter): Query<Filter>,
) -> Response {
    let q = match filter.query(fin.cfg.stale_after) {
        Ok(q) => q,
        Err(e) => return queue_error(e.into()),
    };
    let first = match fin
        .store
        .escalated_page(&q, QueueCursor::start(), CSV_PAGE)
        .await
    {
        Ok(items) => items,
        Err(e) => return db_failed(&e),
    };
    let export = Export {
        store: fin.store.clone(),
        q,
        next: None,
        first: Some(first),
    };
    let header = Bytes::from(finance::csv_header());
    let rows = futures::stream::unfold(export, Export::piece);
    let body = futures::stream::once(async { Ok(header) }).chain(rows);
    let name = format!(
        "attachment; filename=\"cobro-escalations-{}.csv\"",
        chrono::Utc::now().format("%Y-%m-%d")
    );
    (
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()),
            (header::CONTENT_DISPOSITION, name),
        ],
        Body::from_stream(body),
    )
        .into_response()
}
