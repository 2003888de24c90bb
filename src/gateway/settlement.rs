//! What the gateway settled: its balance transactions of type `charge`
//! (`GET /v1/balance_transactions`, Stripe's shape, served by Stripe, by
//! localstripe and by the simulator) and its automatic payouts with the
//! lines each carried (`GET /v1/payouts`, then
//! `GET /v1/balance_transactions?payout=…`).
//!
//! Invariant: all or nothing, as the charge listing: every page is read
//! with Stripe's cursor (`starting_after` = the last id, while `has_more`),
//! pages are bounded ([`PAGE`] objects of at most 8 MiB, at most
//! [`MAX_PAGES`]), a page that
//! does not move on fails the listing, and a 429 is its own error
//! ([`SettleError::Throttled`]) so the run defers instead of judging a
//! partial view. Texts from the gateway are bounded and checked: an id that
//! cannot be stored as it is, or a line whose net is not gross − fee, fails
//! the listing.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::Value;

use crate::domain::settlement::{BalanceLine, PayoutLine};

/// Objects asked for per page (Stripe's maximum).
pub const PAGE: usize = 100;
/// A runaway listing stops here.
pub const MAX_PAGES: usize = 10_000;
const BALANCE: &str = "/v1/balance_transactions";
const PAYOUTS: &str = "/v1/payouts";

/// Why the settlement could not be read. Reconciliation opens nothing on any.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettleError {
    /// 429: the gateway asked us to slow down; the run is deferred.
    #[error("listing {path} was throttled (HTTP 429); the settlement run is deferred")]
    Throttled {
        path: &'static str,
        retry_after: Option<Duration>,
    },
    #[error("listing {path} failed: {error_kind} (no answer from the gateway)")]
    Transport {
        path: &'static str,
        error_kind: String,
    },
    #[error("listing {path} failed: the gateway answered HTTP {status}")]
    Status { path: &'static str, status: u16 },
    #[error("listing {path} failed: {detail}")]
    BadPage { path: &'static str, detail: String },
}

/// Everything read for a window.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settlement {
    /// Balance transactions of type `charge` created in the window.
    pub lines: Vec<BalanceLine>,
    /// Automatic payouts created in the window, with their lines.
    pub payouts: Vec<PayoutLine>,
}

/// One answer of a page request.
pub(crate) struct PageAnswer {
    pub code: u16,
    pub retry_after: Option<Duration>,
    pub body: Option<Value>,
}

/// Why a page request brought no page to read.
pub(crate) enum PageError {
    /// No answer: how the call failed (`connect`, `timeout`, …).
    NoAnswer(String),
    /// An answer past the page cap, in words ("a page larger than 8 MiB").
    TooLarge(&'static str),
}

/// How an adapter sends one `GET` (its own client, auth and timeouts).
pub(crate) trait PageSource: Sync {
    fn fetch<'a>(
        &'a self,
        path: &'a str,
        query: Vec<(String, String)>,
    ) -> BoxFuture<'a, Result<PageAnswer, PageError>>;
}

/// Reads the settlement of `[from, to)`. `server_filter`: the server
/// honours `created[gte]`/`created[lt]` (localstripe does not; the window
/// is filtered here too, so both give the same answer).
pub(crate) async fn read(
    src: &dyn PageSource,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    server_filter: bool,
) -> Result<Settlement, SettleError> {
    let window = (from.timestamp(), to.timestamp() + 1);
    let created = |w: (i64, i64)| -> Vec<(String, String)> {
        if server_filter {
            vec![
                ("created[gte]".into(), w.0.to_string()),
                ("created[lt]".into(), w.1.to_string()),
            ]
        } else {
            Vec::new()
        }
    };
    let mut query = created(window);
    query.push(("expand[]".into(), "data.source".into()));
    let mut lines: Vec<BalanceLine> = all(src, BALANCE, query)
        .await?
        .into_iter()
        .map(line)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|detail| SettleError::BadPage {
            path: BALANCE,
            detail,
        })?
        .into_iter()
        .flatten()
        .filter(|l| from <= l.created && l.created < to)
        .collect();
    let mut payouts = Vec::new();
    let mut carried: HashMap<String, String> = HashMap::new();
    for p in all(src, PAYOUTS, created(window)).await? {
        let p: RawPayout = serde_json::from_value(p).map_err(|e| SettleError::BadPage {
            path: PAYOUTS,
            detail: format!("a payout that cannot be read: {e}"),
        })?;
        let at = stamp(p.created).ok_or_else(|| SettleError::BadPage {
            path: PAYOUTS,
            detail: "a payout without a valid created time".into(),
        })?;
        // Stripe lists a payout's lines only for automatic payouts.
        if !(p.automatic && from <= at && at < to) {
            continue;
        }
        let id = checked_id(&p.id).map_err(|detail| SettleError::BadPage {
            path: PAYOUTS,
            detail,
        })?;
        let of = vec![("payout".to_owned(), id.clone())];
        let mut ids = Vec::new();
        let mut net = 0i64;
        for raw in all(src, BALANCE, of).await? {
            let t: RawTxn = serde_json::from_value(raw).map_err(|e| SettleError::BadPage {
                path: BALANCE,
                detail: format!("a payout's line that cannot be read: {e}"),
            })?;
            if t.kind == "payout" {
                continue; // the payout's own debit
            }
            net = net.saturating_add(t.net);
            carried.insert(t.id.clone(), id.clone());
            ids.push(t.id);
        }
        payouts.push(PayoutLine {
            id,
            amount_minor: p.amount,
            currency: p.currency.to_ascii_uppercase(),
            status: p.status.chars().take(32).collect(),
            created: at,
            lines: ids,
            lines_net_minor: net,
        });
    }
    for l in &mut lines {
        if let Some(p) = carried.get(&l.id) {
            l.payout = Some(p.clone());
        }
    }
    lines.sort_by(|a, b| (a.created, &a.id).cmp(&(b.created, &b.id)));
    Ok(Settlement { lines, payouts })
}

#[derive(Deserialize)]
struct Page {
    #[serde(default)]
    data: Vec<Value>,
    #[serde(default)]
    has_more: bool,
}

#[derive(Deserialize)]
struct RawTxn {
    id: String,
    #[serde(default)]
    amount: i64,
    #[serde(default)]
    fee: i64,
    #[serde(default)]
    net: i64,
    #[serde(default)]
    currency: String,
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    source: Option<Value>,
    #[serde(default)]
    status: String,
    #[serde(default)]
    created: i64,
}

#[derive(Deserialize)]
struct RawPayout {
    id: String,
    #[serde(default)]
    amount: i64,
    #[serde(default)]
    currency: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    automatic: bool,
    #[serde(default)]
    created: i64,
}

/// Every object of `path`, all pages.
async fn all(
    src: &dyn PageSource,
    path: &'static str,
    extra: Vec<(String, String)>,
) -> Result<Vec<Value>, SettleError> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let mut query = extra.clone();
        query.push(("limit".into(), PAGE.to_string()));
        if let Some(a) = &after {
            query.push(("starting_after".into(), a.clone()));
        }
        let answer = src.fetch(path, query).await.map_err(|e| match e {
            PageError::NoAnswer(error_kind) => SettleError::Transport { path, error_kind },
            PageError::TooLarge(what) => SettleError::BadPage {
                path,
                detail: what.into(),
            },
        })?;
        match answer.code {
            200 => {}
            429 => {
                return Err(SettleError::Throttled {
                    path,
                    retry_after: answer.retry_after,
                });
            }
            status => return Err(SettleError::Status { path, status }),
        }
        let page: Page = answer
            .body
            .and_then(|b| serde_json::from_value(b).ok())
            .ok_or_else(|| SettleError::BadPage {
                path,
                detail: "a page that is not a list".into(),
            })?;
        if page.data.len() > PAGE {
            return Err(SettleError::BadPage {
                path,
                detail: format!(
                    "a page of {} objects, more than the {PAGE} asked",
                    page.data.len()
                ),
            });
        }
        let last = page
            .data
            .last()
            .and_then(|o| o.get("id"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        if page.has_more && (last.is_none() || last == after) {
            return Err(SettleError::BadPage {
                path,
                detail: "pages do not move on".into(),
            });
        }
        out.extend(page.data);
        if !page.has_more {
            return Ok(out);
        }
        after = last;
    }
    Err(SettleError::BadPage {
        path,
        detail: format!("more than {MAX_PAGES} pages"),
    })
}

/// A listed balance transaction as a line; `None` when it is not a charge's.
fn line(raw: Value) -> Result<Option<BalanceLine>, String> {
    let t: RawTxn =
        serde_json::from_value(raw).map_err(|e| format!("a line that cannot be read: {e}"))?;
    if t.kind != "charge" && t.kind != "payment" {
        return Ok(None);
    }
    let id = checked_id(&t.id)?;
    // Expanded (`expand[]=data.source`): the charge object, whose
    // PaymentIntent is what a Stripe attempt records; else the charge id.
    let source = match &t.source {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(o)) => o
            .get("payment_intent")
            .and_then(Value::as_str)
            .or_else(|| o.get("id").and_then(Value::as_str))
            .unwrap_or_default()
            .to_owned(),
        _ => String::new(),
    };
    let source = checked_id(&source).map_err(|e| format!("line {id}: source {e}"))?;
    if t.amount.checked_sub(t.fee) != Some(t.net) {
        return Err(format!(
            "line {id}: net {} is not amount {} - fee {}",
            t.net, t.amount, t.fee
        ));
    }
    let currency = t.currency.to_ascii_uppercase();
    if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(format!("line {id}: a currency that is not 3 letters"));
    }
    let created = stamp(t.created).ok_or_else(|| format!("line {id}: no valid created time"))?;
    Ok(Some(BalanceLine {
        id,
        source,
        gross_minor: t.amount,
        fee_minor: t.fee,
        net_minor: t.net,
        currency,
        status: t.status.chars().take(32).collect(),
        created,
        payout: None,
    }))
}

/// An id as it can be stored: 1-255 printable ASCII characters.
fn checked_id(id: &str) -> Result<String, String> {
    if (1..=255).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic()) {
        Ok(id.to_owned())
    } else {
        Err("an id that is empty, too long or not printable ASCII".into())
    }
}

fn stamp(secs: i64) -> Option<DateTime<Utc>> {
    Utc.timestamp_opt(secs, 0).single()
}
