//! The operator view: every attempt (charges and refunds, in any state),
//! searched by exact order id or idempotency key, state, kind and a
//! created-at window, newest first, paginated in SQL
//! ([`Store::list_attempts`]). `cobro attempts`, `GET /attempts` and the
//! page `/operator/attempts` all call [`search`]; an attempt's detail (the
//! attempt, its full transition history and its lookups) is the one
//! [`crate::finance::detail`].
//!
//! Invariant: read-only; a bad parameter is refused naming it, never
//! ignored, and a page larger than [`MAX_LIMIT`] is refused, never cut.

use chrono::{DateTime, NaiveDate, Utc};
use serde::Serialize;
use uuid::Uuid;

use crate::domain::InputError;
use crate::finance::{decode_cursor, encode_cursor};
use crate::state::State;
use crate::store::{Attempt, AttemptFilter, AttemptKind, QueueCursor, Store, StoreError};

/// Attempts per page when none is asked for.
pub const DEFAULT_LIMIT: u32 = 50;
/// The largest page.
pub const MAX_LIMIT: u32 = 100;

/// The parameters, as the API's query string, the page's form and the
/// CLI's flags name them.
pub const PARAMS: [&str; 8] = [
    "order_id", "key", "state", "kind", "from", "to", "cursor", "limit",
];

/// A search as a person or a program gives it: text, not yet validated.
/// An empty value is the same as none (an empty field of the page's form).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Search {
    pub order_id: Option<String>,
    pub key: Option<String>,
    pub state: Option<String>,
    pub kind: Option<String>,
    /// Created at or after: RFC 3339, or a date (its first instant, UTC).
    pub from: Option<String>,
    /// Created before: RFC 3339, or a date (the whole day included).
    pub to: Option<String>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
    pub limit: Option<String>,
}

/// A parameter [`Search::from_pairs`] does not know, or one given twice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}: {reason}")]
pub struct BadParam {
    pub name: String,
    pub reason: String,
}

impl Search {
    /// From a query string's pairs: an unknown name (a typo such as
    /// `stat=`) or a name given twice is refused, never ignored.
    pub fn from_pairs<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, BadParam> {
        let mut s = Search::default();
        for (name, value) in pairs {
            let slot = match name {
                "order_id" => &mut s.order_id,
                "key" => &mut s.key,
                "state" => &mut s.state,
                "kind" => &mut s.kind,
                "from" => &mut s.from,
                "to" => &mut s.to,
                "cursor" => &mut s.cursor,
                "limit" => &mut s.limit,
                _ => {
                    return Err(BadParam {
                        name: name.to_owned(),
                        reason: format!("unknown parameter; known: {}", PARAMS.join(", ")),
                    });
                }
            };
            if slot.is_some() {
                return Err(BadParam {
                    name: name.to_owned(),
                    reason: "given twice".into(),
                });
            }
            *slot = Some(value.to_owned());
        }
        Ok(s)
    }

    /// The filters, without the page: what a "next page" link keeps.
    pub fn filters(&self) -> Vec<(&'static str, &str)> {
        [
            ("order_id", &self.order_id),
            ("key", &self.key),
            ("state", &self.state),
            ("kind", &self.kind),
            ("from", &self.from),
            ("to", &self.to),
        ]
        .into_iter()
        .filter_map(|(k, v)| given(v).map(|v| (k, v)))
        .collect()
    }

    /// The store's filter, the page's start and size; a bad value names
    /// its parameter.
    pub fn parse(&self) -> Result<(AttemptFilter, Option<QueueCursor>, u32), InputError> {
        // Checked as the enqueue checks it (length in characters, no
        // control characters: PostgreSQL refuses a NUL in text).
        let order_id = match given(&self.order_id) {
            Some(o) => Some(crate::domain::OrderId::parse(o)?.as_str().to_owned()),
            None => None,
        };
        let idempotency_key = given(&self.key)
            .map(|k| {
                Uuid::try_parse(k)
                    .map_err(|_| InputError::new("key", "an idempotency key is a UUID"))
            })
            .transpose()?;
        let state = given(&self.state)
            .map(|s| {
                s.parse::<State>().map_err(|_| {
                    let all: Vec<&str> = State::ALL.iter().map(|s| s.as_str()).collect();
                    InputError::new("state", format!("one of {}", all.join(", ")))
                })
            })
            .transpose()?;
        let kind = given(&self.kind)
            .map(|k| {
                AttemptKind::parse(k).ok_or_else(|| {
                    InputError::new("kind", format!("one of {}", AttemptKind::NAMES))
                })
            })
            .transpose()?;
        let created_from = given(&self.from)
            .map(|t| time(t, "from", false))
            .transpose()?;
        let created_to = given(&self.to).map(|t| time(t, "to", true)).transpose()?;
        if let (Some(from), Some(to)) = (created_from, created_to)
            && from >= to
        {
            return Err(InputError::new("to", "must be later than from"));
        }
        let after = given(&self.cursor)
            .map(|c| decode_cursor(c, "cursor"))
            .transpose()?;
        let limit = match given(&self.limit) {
            None => DEFAULT_LIMIT,
            Some(l) => l
                .parse::<u32>()
                .ok()
                .filter(|l| (1..=MAX_LIMIT).contains(l))
                .ok_or_else(|| {
                    InputError::new("limit", format!("1 to {MAX_LIMIT} attempts per page"))
                })?,
        };
        let filter = AttemptFilter {
            order_id,
            idempotency_key,
            state,
            kind,
            created_from,
            created_to,
        };
        Ok((filter, after, limit))
    }
}

fn given(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

/// RFC 3339, or a date: its first instant (`from`), or the first instant
/// of the next day (`to`, so that the day is included). A `+` offset sent
/// unencoded in a query string arrives as a space, and is read as `+`.
fn time(s: &str, field: &'static str, end: bool) -> Result<DateTime<Utc>, InputError> {
    let rfc3339 = |s: &str| DateTime::parse_from_rfc3339(s).ok();
    if let Some(t) = rfc3339(s).or_else(|| rfc3339(&s.replace(' ', "+"))) {
        return Ok(t.with_timezone(&Utc));
    }
    NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .ok()
        .and_then(|d| if end { d.succ_opt() } else { Some(d) })
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
        .ok_or_else(|| {
            InputError::new(
                field,
                "an RFC 3339 time (2026-12-01T08:00:00Z) or a date (2026-12-01, UTC)",
            )
        })
}

/// One page of the search.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct AttemptsPage {
    /// Newest first.
    pub items: Vec<Attempt>,
    /// The `cursor` of the next page; `None` on the last one.
    pub next_cursor: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error(transparent)]
    Invalid(#[from] InputError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One page of the attempts `s` selects, newest first.
pub async fn search(store: &Store, s: &Search) -> Result<AttemptsPage, SearchError> {
    let (filter, after, limit) = s.parse()?;
    // One more than asked tells whether a next page exists.
    let mut items = store
        .list_attempts(&filter, after, i64::from(limit) + 1)
        .await?;
    let more = items.len() > limit as usize;
    items.truncate(limit as usize);
    let next_cursor = more
        .then(|| items.last().map(|a| encode_cursor(&QueueCursor::after(a))))
        .flatten();
    Ok(AttemptsPage { items, next_cursor })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<(AttemptFilter, u32), String> {
        let s = Search::from_pairs(pairs.iter().copied()).map_err(|e| e.name)?;
        s.parse()
            .map(|(f, _, l)| (f, l))
            .map_err(|e| e.field.to_owned())
    }

    #[test]
    fn each_bad_parameter_is_named() {
        for (pairs, field) in [
            (&[("stat", "APROBADO")][..], "stat"),
            (&[("state", "a"), ("state", "b")][..], "state"),
            (&[("state", "approved")][..], "state"),
            (&[("kind", "refunds")][..], "kind"),
            (&[("key", "k-1")][..], "key"),
            (&[("from", "yesterday")][..], "from"),
            (&[("to", "2026-13-01")][..], "to"),
            (&[("from", "2026-12-02"), ("to", "2026-12-01")][..], "to"),
            (&[("cursor", "nope")][..], "cursor"),
            (&[("limit", "0")][..], "limit"),
            (&[("limit", "101")][..], "limit"),
            (&[("limit", "ten")][..], "limit"),
        ] {
            assert_eq!(parse(pairs).unwrap_err(), field, "{pairs:?}");
        }
    }

    #[test]
    fn dates_cover_whole_days_and_empty_values_are_absent() {
        let (f, limit) = parse(&[
            ("order_id", " order-7 "),
            ("state", ""),
            ("kind", "charge"),
            ("from", "2026-12-01"),
            ("to", "2026-12-01"),
        ])
        .unwrap();
        assert_eq!(limit, DEFAULT_LIMIT);
        assert_eq!(f.order_id.as_deref(), Some("order-7"));
        assert_eq!(f.state, None);
        assert_eq!(f.kind, Some(AttemptKind::Charge));
        assert_eq!(
            f.created_from.unwrap().to_rfc3339(),
            "2026-12-01T00:00:00+00:00"
        );
        assert_eq!(
            f.created_to.unwrap().to_rfc3339(),
            "2026-12-02T00:00:00+00:00"
        );
        for unencoded in ["2026-12-01T08:30:00+01:00", "2026-12-01T08:30:00 01:00"] {
            let (f, _) = parse(&[("to", unencoded)]).unwrap();
            assert_eq!(
                f.created_to.unwrap().to_rfc3339(),
                "2026-12-01T07:30:00+00:00"
            );
        }
    }
}
