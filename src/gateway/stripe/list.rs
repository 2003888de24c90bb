//! Stripe's lists: PaymentIntents and refunds by `created` window for
//! reconciliation, the pages a lookup walks ([`super::find`]), and a
//! PaymentIntent's refunds; every page, with `starting_after`.
//!
//! Invariant: a listing is all or nothing: a failed page fails it, and
//! pages that do not move on fail it, never a partial answer. The window is
//! also filtered here, so a Stripe-compatible server without the `created`
//! filter (localstripe; `STRIPE_CREATED_FILTER=false`) is listed in full
//! and gives the same answer. An object whose id cannot be stored as it is
//! fails the listing, as one without an id does ([`Object::tidied`]).

use chrono::{DateTime, TimeZone, Utc};

use super::StripeGateway;
use super::classify::{self, META_ORDER, Object, Settled};
use crate::gateway::http::Transport;
use crate::gateway::{GatewayRecord, ListError, Listed};

const PAGE: usize = 100;
/// A runaway reconciliation listing stops here (a million objects); a
/// lookup's listing has its own, smaller cap ([`super::FindConfig`]).
const MAX_PAGES: usize = 10_000;

impl StripeGateway {
    /// Every object of `path` with `from <= created < to` (seconds).
    async fn all(
        &self,
        kind: Listed,
        path: &str,
        extra: &[(String, String)],
        window: Option<(i64, i64)>,
    ) -> Result<Vec<Object>, ListError> {
        self.walk(kind, path, extra, window, MAX_PAGES, None)
            .await
            .map_err(|w| match w {
                Walk::NotNow { status, .. } => ListError::Status { kind, status },
                Walk::Capped(pages) => ListError::BadPage {
                    kind,
                    detail: format!("more than {pages} pages"),
                },
                Walk::Failed(e) => e,
            })
    }

    /// The objects of `path` in `window`, at most `max_pages` pages of
    /// them; with `until`, it stops at the page holding the object whose
    /// metadata carries that key (the lookup needs no more).
    pub(super) async fn walk(
        &self,
        kind: Listed,
        path: &str,
        extra: &[(String, String)],
        window: Option<(i64, i64)>,
        max_pages: usize,
        until: Option<&str>,
    ) -> Result<Vec<Object>, Walk> {
        let server_filter = self.created_filter;
        let mut out = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..max_pages {
            let mut query: Vec<(String, String)> = extra.to_vec();
            query.push(("limit".into(), PAGE.to_string()));
            if let (true, Some((from, to))) = (server_filter, window) {
                query.push(("created[gte]".into(), from.to_string()));
                query.push(("created[lt]".into(), to.to_string()));
            }
            if let Some(a) = &after {
                query.push(("starting_after".into(), a.clone()));
            }
            let answer = self.get_page(path, &query).await.map_err(|t| {
                Walk::Failed(match t {
                    Transport::NotSent(k) | Transport::Unknown(k) => ListError::Transport {
                        kind,
                        error_kind: k.into(),
                    },
                    Transport::TooLarge { what, .. } => ListError::BadPage {
                        kind,
                        detail: what.into(),
                    },
                })
            })?;
            match (answer.code, answer.retry_after) {
                (200, _) => {}
                (429, retry_after) | (503, retry_after @ Some(_)) => {
                    return Err(Walk::NotNow {
                        status: answer.code,
                        retry_after,
                    });
                }
                (status, _) => return Err(Walk::Failed(ListError::Status { kind, status })),
            }
            let mut page: Page = answer
                .body
                .and_then(|b| serde_json::from_value(b).ok())
                .ok_or_else(|| {
                    Walk::Failed(ListError::BadPage {
                        kind,
                        detail: "a page that is not a list".into(),
                    })
                })?;
            // An object whose id cannot be stored fails the listing, as
            // one without an id (a page that does not parse) does.
            page.data = page
                .data
                .into_iter()
                .map(Object::tidied)
                .collect::<Result<_, _>>()
                .map_err(|note| {
                    Walk::Failed(ListError::BadPage {
                        kind,
                        detail: format!("a listed object's {note}"),
                    })
                })?;
            let last = page.data.last().map(|o| o.id.clone());
            if page.has_more && (last.is_none() || last == after) {
                return Err(Walk::Failed(ListError::BadPage {
                    kind,
                    detail: "pages do not move on".into(),
                }));
            }
            let before = out.len();
            out.extend(page.data.into_iter().filter(|o| match window {
                Some((from, to)) => o.created.is_some_and(|c| from <= c && c < to),
                None => true,
            }));
            let found = until.is_some_and(|k| out[before..].iter().any(|o| o.key() == Some(k)));
            if !page.has_more || found {
                return Ok(out);
            }
            after = last;
        }
        Err(Walk::Capped(max_pages))
    }

    /// Every refund of a PaymentIntent (up to the one carrying `key`).
    pub(super) async fn refunds_of(&self, pi: &str, key: &str) -> Result<Vec<Object>, Walk> {
        let extra = [("payment_intent".to_owned(), pi.to_owned())];
        self.walk(
            Listed::Refunds,
            "/v1/refunds",
            &extra,
            None,
            MAX_PAGES,
            Some(key),
        )
        .await
    }

    /// Reconciliation's window: executed charges (succeeded or failed
    /// PaymentIntents; unconfirmed ones charged nothing) or refunds.
    pub(super) async fn list_window(
        &self,
        kind: Listed,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<GatewayRecord>, ListError> {
        // Stripe's `created` is whole seconds: widen to them, then keep the
        // exact window.
        let secs = (from.timestamp(), to.timestamp() + 1);
        let path = match kind {
            Listed::Charges => "/v1/payment_intents",
            Listed::Refunds => "/v1/refunds",
        };
        let all = self.all(kind, path, &[], Some(secs)).await?;
        let mut records: Vec<GatewayRecord> = all
            .into_iter()
            .filter_map(|o| record(kind, o))
            .filter(|r| from <= r.at && r.at < to)
            .collect();
        records.sort_by(|a, b| (a.at, &a.id).cmp(&(b.at, &b.id)));
        Ok(records)
    }
}

/// Why a walk through a list's pages ended without the list.
pub(super) enum Walk {
    /// A 429, or a 503 with `Retry-After`: that page was not served, for now.
    NotNow {
        status: u16,
        retry_after: Option<std::time::Duration>,
    },
    /// The page cap was reached with pages left.
    Capped(usize),
    Failed(ListError),
}

/// A list's page, or a search's (the same `data` and `has_more`).
#[derive(serde::Deserialize)]
pub(super) struct Page {
    #[serde(default)]
    pub(super) data: Vec<Object>,
    #[serde(default)]
    pub(super) has_more: bool,
}

/// One listed object as reconciliation reads it; `None` for what was not
/// executed (an unconfirmed, processing or canceled PaymentIntent).
fn record(kind: Listed, o: Object) -> Option<GatewayRecord> {
    let status = match kind {
        Listed::Charges => match classify::settle(&o) {
            Settled::Succeeded => "approved",
            Settled::Failed { .. } if o.status.as_deref() != Some("canceled") => "declined",
            _ => return None,
        },
        Listed::Refunds => match o.status.as_deref() {
            Some("succeeded") => "approved",
            // Accepted, may still fail: counted, never settles an attempt.
            Some("pending") => "pending",
            Some("failed" | "canceled") => "declined",
            _ => return None,
        },
    };
    Some(GatewayRecord {
        kind,
        idempotency_key: crate::domain::text::stored(
            o.key().unwrap_or_default(),
            crate::domain::text::Kind::Id,
        ),
        order_id: o.metadata.get(META_ORDER).cloned().unwrap_or_default(),
        amount_minor: o.amount.unwrap_or_default(),
        currency: o.currency.clone().unwrap_or_default().to_ascii_uppercase(),
        status: status.into(),
        charge_id: match kind {
            Listed::Charges => None,
            Listed::Refunds => o.payment_intent.clone(),
        },
        at: Utc.timestamp_opt(o.created?, 0).single()?,
        id: o.id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refund(status: &str) -> Object {
        serde_json::from_value(serde_json::json!({
            "id": "re_1", "status": status, "amount": 500, "currency": "eur", "created": 1_700_000_000,
            "payment_intent": "pi_1", "metadata": {}
        }))
        .unwrap()
    }

    /// A pending refund may still fail: listed as pending, which the
    /// reconciliation's report counts and nothing settles on.
    #[test]
    fn a_refund_is_listed_by_what_stripe_says_of_it() {
        let status = |s: &str| record(Listed::Refunds, refund(s)).map(|r| r.status);
        assert_eq!(status("succeeded").as_deref(), Some("approved"));
        assert_eq!(status("pending").as_deref(), Some("pending"));
        assert_eq!(status("failed").as_deref(), Some("declined"));
        assert_eq!(status("requires_action"), None);
        let pending = record(Listed::Refunds, refund("pending")).unwrap();
        assert!(pending.is_approved() && !pending.is_final());
    }
}
