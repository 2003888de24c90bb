//! The HTTP adapter's listing: `GET /v1/charges` and `GET /v1/refunds` with
//! `from`, `to`, `limit` and `starting_after`, page after page until
//! `has_more` is false; and the page source the settlement reader pages
//! with (`GET /v1/balance_transactions`, `GET /v1/payouts`). Every page's
//! body is read within [`Cap::PAGE`] (8 MiB): a larger one fails the
//! listing.
//!
//! Invariant: every page goes through the same client (connect and request
//! timeouts) as charges; the first page that fails fails the listing, and a
//! page that does not move the cursor on is an error, never a loop, as is
//! a listing past [`MAX_PAGES`] (never a list cut short). An item
//! whose id (or refunded charge id) cannot be stored as it is fails the
//! listing as one without an id does; its other texts are escaped and
//! bounded ([`crate::domain::text`]).

use chrono::{DateTime, SecondsFormat, Utc};
use futures::FutureExt;
use futures::future::BoxFuture;
use serde::Deserialize;

use super::body::{self, Cap, Unread};
use super::{HttpGateway, Resource, transport_kind};
use crate::domain::text::{self, Kind};
use crate::gateway::settlement::{PageAnswer, PageError, PageSource};
use crate::gateway::{GatewayRecord, ListError, Listed};

/// Records asked for per page (the simulator's default; its maximum is 1000).
pub(super) const PAGE_SIZE: usize = 100;
/// A runaway listing stops here (a million records, as Stripe's does): a
/// gateway that keeps saying `has_more` fails the listing instead of
/// growing it without end.
const MAX_PAGES: usize = 10_000;

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
    /// Every record of `[from, to)`, all pages (at most [`MAX_PAGES`]).
    pub(super) async fn list_all(
        &self,
        kind: Listed,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<GatewayRecord>, ListError> {
        let mut records: Vec<GatewayRecord> = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..MAX_PAGES {
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
        // Never the records read so far: a cut list would read as "missing
        // at the gateway" to reconciliation.
        Err(ListError::BadPage {
            kind,
            detail: format!(
                "more than {MAX_PAGES} pages of {PAGE_SIZE}, and the gateway still says there are more"
            ),
        })
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
        let bytes = body::read(resp, Cap::PAGE).await.map_err(|u| match u {
            Unread::Broken(e) => transport(kind, e),
            Unread::TooLarge(what) => ListError::BadPage {
                kind,
                detail: what.into(),
            },
        })?;
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
/// `refund_id` and the `charge_id` it refunds. The key, order, currency and
/// status are kept escaped and bounded: a key or order that had to be
/// changed was never one of ours (ours are UUIDs, and order ids of at most
/// 200 characters without control characters), so it matches nothing,
/// altered or not.
fn record(kind: Listed, item: Item) -> Result<GatewayRecord, ListError> {
    let (id_field, id, charge_id) = match kind {
        Listed::Charges => ("charge_id", item.charge_id, None),
        Listed::Refunds => ("refund_id", item.refund_id, item.charge_id),
    };
    let Some(id) = id else {
        return Err(ListError::BadPage {
            kind,
            detail: "a listed item has no id".into(),
        });
    };
    let usable = |field: &str, raw: &str| {
        text::id(raw).map(drop).map_err(|why| ListError::BadPage {
            kind,
            detail: format!("a listed item's {}", text::unusable(field, raw, &why)),
        })
    };
    usable(id_field, &id)?;
    if let Some(charge) = &charge_id {
        usable("charge_id", charge)?;
    }
    Ok(GatewayRecord {
        kind,
        id,
        idempotency_key: text::stored(&item.idempotency_key, Kind::Id),
        order_id: text::stored(&item.order_id, Kind::Message),
        amount_minor: item.amount_minor,
        currency: text::stored(&item.currency, Kind::Code),
        status: text::stored(&item.status, Kind::Code),
        charge_id,
        at: item.at,
    })
}

impl PageSource for HttpGateway {
    fn fetch<'a>(
        &'a self,
        path: &'a str,
        query: Vec<(String, String)>,
    ) -> BoxFuture<'a, Result<PageAnswer, PageError>> {
        async move {
            let resp = self
                .client
                .get(format!("{}{path}", self.base))
                .query(&query)
                .send()
                .await
                .map_err(|e| PageError::NoAnswer(transport_kind(&e).to_owned()))?;
            let code = resp.status().as_u16();
            let retry_after = resp
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| super::retry_after(v, Utc::now()));
            let bytes = body::read(resp, Cap::PAGE).await.map_err(|u| match u {
                Unread::Broken(e) => PageError::NoAnswer(transport_kind(&e).to_owned()),
                Unread::TooLarge(what) => PageError::TooLarge(what),
            })?;
            Ok(PageAnswer {
                code,
                retry_after,
                body: serde_json::from_slice(&bytes).ok(),
            })
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(charge_id: Option<&str>, refund_id: Option<&str>) -> Item {
        Item {
            charge_id: charge_id.map(Into::into),
            refund_id: refund_id.map(Into::into),
            idempotency_key: "k\0".into(),
            order_id: "o\0".into(),
            amount_minor: 100,
            currency: "EUR\0".into(),
            status: "approved".into(),
            at: DateTime::from_timestamp(1_764_547_200, 0).unwrap(),
        }
    }

    #[test]
    fn an_item_whose_id_cannot_be_stored_fails_the_listing_and_other_text_is_escaped() {
        let r = record(Listed::Charges, item(Some("ch_1"), None)).unwrap();
        assert_eq!(
            (r.idempotency_key.as_str(), r.order_id.as_str()),
            (r"k\u0000", r"o\u0000")
        );
        assert_eq!(r.currency, r"EUR\u0000");
        for (kind, it) in [
            (Listed::Charges, item(Some("ch_\0"), None)),
            (Listed::Refunds, item(Some("ch_1"), Some(&"r".repeat(256)))),
            (Listed::Refunds, item(Some("ch_\n"), Some("re_1"))),
        ] {
            let err = record(kind, it).unwrap_err().to_string();
            assert!(
                err.contains("a listed item's") && !err.contains('\0'),
                "{err}"
            );
        }
    }
}
