//! The HTTP adapter's listing: `GET /v1/charges` and `GET /v1/refunds` with
//! `from`, `to`, `limit` and `starting_after`, page after page until
//! `has_more` is false.
//!
//! Invariant: every page goes through the same client (connect and request
//! timeouts) as charges; the first page that fails fails the listing, and a
//! page that does not move the cursor on is an error, never a loop.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Deserialize;

use super::{HttpGateway, Resource, transport_kind};
use crate::gateway::{GatewayRecord, ListError, Listed};

/// Records asked for per page (the simulator's default; its maximum is 1000).
pub(super) const PAGE_SIZE: usize = 100;

#[derive(Deserialize)]
struct Page {
    data: Vec<Item>,
    has_more: bool,
}

/// One listed charge (`charge_id`) or refund (`refund_id` of `charge_id`).
#[derive(Deserialize)]
struct Item {
    #[serde(default)]
    charge_id: Option<String>,
    #[serde(default)]
    refund_id: Option<String>,
    idempotency_key: String,
    order_id: String,
    amount_minor: i64,
    currency: String,
    status: String,
    at: DateTime<Utc>,
}

impl From<Listed> for Resource {
    fn from(kind: Listed) -> Self {
        match kind {
            Listed::Charges => Resource::Charges,
            Listed::Refunds => Resource::Refunds,
        }
    }
}

impl HttpGateway {
    /// Every record of `[from, to)`, all pages.
    pub(super) async fn list_all(
        &self,
        kind: Listed,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<GatewayRecord>, ListError> {
        let mut records: Vec<GatewayRecord> = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self.list_page(kind, from, to, after.as_deref()).await?;
            for item in page.data {
                records.push(record(kind, item)?);
            }
            if !page.has_more {
                return Ok(records);
            }
            let next = records.last().map(|r| r.id.clone());
            if next.is_none() || next == after {
                return Err(ListError::BadPage {
                    kind,
                    detail: "has_more is true but the page did not move on".into(),
                });
            }
            after = next;
        }
    }

    async fn list_page(
        &self,
        kind: Listed,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        after: Option<&str>,
    ) -> Result<Page, ListError> {
        let stamp = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Micros, true);
        let mut query = vec![
            ("from", stamp(from)),
            ("to", stamp(to)),
            ("limit", PAGE_SIZE.to_string()),
        ];
        if let Some(id) = after {
            query.push(("starting_after", id.to_owned()));
        }
        let resp = self
            .client
            .get(format!("{}{}", self.base, Resource::from(kind).path()))
            .query(&query)
            .send()
            .await
            .map_err(|e| transport(kind, e))?;
        let status = resp.status().as_u16();
        if status != 200 {
            return Err(ListError::Status { kind, status });
        }
        let bytes = resp.bytes().await.map_err(|e| transport(kind, e))?;
        serde_json::from_slice(&bytes).map_err(|e| ListError::BadPage {
            kind,
            detail: format!("unreadable page: {e}"),
        })
    }
}

fn transport(kind: Listed, e: reqwest::Error) -> ListError {
    ListError::Transport {
        kind,
        error_kind: transport_kind(&e).to_owned(),
    }
}

/// A listed item as a record; a charge needs its `charge_id`, a refund its
/// `refund_id` and the `charge_id` it refunds.
fn record(kind: Listed, item: Item) -> Result<GatewayRecord, ListError> {
    let (id, charge_id) = match kind {
        Listed::Charges => (item.charge_id, None),
        Listed::Refunds => (item.refund_id, item.charge_id),
    };
    let Some(id) = id else {
        return Err(ListError::BadPage {
            kind,
            detail: "a listed item has no id".into(),
        });
    };
    Ok(GatewayRecord {
        kind,
        id,
        idempotency_key: item.idempotency_key,
        order_id: item.order_id,
        amount_minor: item.amount_minor,
        currency: item.currency,
        status: item.status,
        charge_id,
        at: item.at,
    })
}
