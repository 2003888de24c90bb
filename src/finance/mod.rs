//! Finance: the escalation queue, its resolutions, and the daily summary.
//! The CLI, the JSON API and the HTML page all call these functions; there
//! is one implementation.
//!
//! Invariant: a resolution is a compare-and-set write through the state
//! machine ([`Store::apply`]): it names the version the person looked at,
//! so resolving twice, or resolving something that moved meanwhile, is a
//! clear error and never a silent overwrite; the transition-log row carries
//! `finance:<name>` and the note. Nothing here creates a charge.

mod csv;
mod pages;
mod summary;

pub use csv::{csv_header, csv_rows, settlements_csv, to_csv};
pub(crate) use pages::for_each_page;
pub use pages::{
    CasesPage, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, PageRequest, QueueError, QueuePage, cases_page,
    decode_cursor, encode_cursor, open_cases, queue, queue_page,
};
pub use summary::{SettledLine, Summary, summarize};

use std::time::Duration;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::domain::InputError;
use crate::gateway::Evidence;
use crate::janitor::DECLINE_REQUESTED;
use crate::state::{Event, State};
use crate::store::{
    Applied, Attempt, CaseError, Change, QueueCursor, QueueQuery, ReconCase, Store, StoreError,
    Transition,
};

/// How stale a `DESCONOCIDO` attempt must be to reach finance by default.
pub const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(3600);

/// What finance decides about an attempt in the queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Resolution {
    /// The gateway did charge (or refund): its id, as finance found it.
    Approve { charge_id: String },
    /// The gateway did not: a decline code for the record.
    Decline { code: String },
    /// Look it up again now (a fresh lookup by key; no state is decided).
    CheckNow,
}

impl Resolution {
    fn validate(&self) -> Result<(), InputError> {
        match self {
            Resolution::Approve { charge_id } => {
                let ok = (1..=255).contains(&charge_id.len())
                    && charge_id
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_-.:".contains(c));
                if !ok {
                    return Err(InputError::new(
                        "charge_id",
                        "the gateway's charge id is required: 1-255 letters, digits, _ - . :",
                    ));
                }
            }
            Resolution::Decline { code } => {
                let ok = (1..=64).contains(&code.len())
                    && code
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
                if !ok {
                    return Err(InputError::new(
                        "code",
                        "a decline code is required: 1-64 of a-z, 0-9, _",
                    ));
                }
            }
            Resolution::CheckNow => {}
        }
        Ok(())
    }
}

/// One resolution, as a person asks for it.
#[derive(Debug, Clone)]
pub struct ResolveRequest<'a> {
    pub attempt_id: Uuid,
    /// The attempt's version the person was looking at.
    pub version: i64,
    pub resolution: Resolution,
    /// Who (kept in the transition log as `finance:<by>`).
    pub by: &'a str,
    pub note: &'a str,
}

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(transparent)]
    Invalid(#[from] InputError),
    #[error("no attempt with id {0}")]
    NotFound(Uuid),
    /// The attempt changed since the person looked (another resolution, a
    /// worker's lookup, a webhook): reload and decide again.
    #[error("{0}")]
    Moved(String),
    /// Settled or not in doubt: nothing for finance to resolve.
    #[error("{0}")]
    NotEscalated(String),
    /// A worker holds the attempt (it is asking the gateway right now): a
    /// decision now could overwrite the answer it is about to record.
    #[error("{0}")]
    Busy(String),
    /// A decline of an attempt whose payment object (a Stripe
    /// PaymentIntent) exists at the gateway and may still succeed, or of a
    /// charge or refund that was sent, while it is still being checked
    /// (`DESCONOCIDO`): asked for once in review.
    #[error("{0}")]
    OpenAtGateway(String),
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for ResolveError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(id) => ResolveError::NotFound(id),
            other => ResolveError::Store(other),
        }
    }
}

fn validate_person(by: &str, note: &str) -> Result<(), InputError> {
    if by.trim().is_empty() || by.chars().count() > 100 || by.chars().any(char::is_control) {
        return Err(InputError::new(
            "by",
            "who resolves it is required (1-100 characters)",
        ));
    }
    crate::domain::text::note("note", note, 2000, "a note of what you checked and why")?;
    Ok(())
}

/// Resolves an attempt of the queue. Returns the attempt as it is now.
pub async fn resolve(store: &Store, req: &ResolveRequest<'_>) -> Result<Attempt, ResolveError> {
    validate_person(req.by, req.note)?;
    req.resolution.validate()?;
    let (seen, now) = store.load(req.attempt_id).await?;
    if seen.version != req.version {
        return Err(moved(&seen, req.version));
    }
    // While a worker holds the lease it is talking to the gateway; its
    // answer must not be overwritten by a decision taken without it. (Once
    // it records the answer the version moves, and a decision taken on the
    // old version is refused as "changed".)
    if let Some(until) = seen.lease_expires_at.filter(|until| *until > now) {
        return Err(ResolveError::Busy(format!(
            "attempt {} is being looked up at the gateway by {} right now; try again after {} UTC",
            seen.id,
            seen.lease_owner.as_deref().unwrap_or("a worker"),
            until.format("%H:%M:%S")
        )));
    }
    if !matches!(seen.state, State::Desconocido | State::EnRevision) {
        return Err(ResolveError::NotEscalated(format!(
            "attempt {} is {}: there is nothing to resolve",
            seen.id, seen.state
        )));
    }
    let actor = format!("finance:{}", req.by.trim());
    let evidence = Evidence {
        call: "finance".into(),
        error_kind: "manual".into(),
        detail: Some(req.note.trim().to_owned()),
        ..Evidence::default()
    };
    let mut requested = None;
    let mut change = match &req.resolution {
        Resolution::Approve { charge_id } => {
            let mut c = Change::new(Some(Event::Approved), "finance_approved", &actor);
            c.charge_id = Some(charge_id);
            c
        }
        Resolution::Decline { code } if seen.gateway_ref.is_some() || seen.send_count > 0 => {
            // A two-step gateway's object (a Stripe PaymentIntent) could
            // still be confirmed and succeed behind a decline recorded here;
            // a charge or refund that was sent may still be executing at
            // the gateway, absent from its dashboard until it completes
            // (and a refund recorded as declined frees its amount to be
            // refunded again). The decline is asked for: the review janitor
            // cancels a payment object at the gateway, and records the
            // decline once the gateway says it is final, or has no record
            // of a send long after it (or records what the gateway says
            // instead, if it charged or refunded).
            if seen.state != State::EnRevision {
                let what = match seen.gateway_ref.as_deref() {
                    Some(object) => format!(
                        "has the payment object {object} at the gateway, which may still \
                         succeed, and it is still being checked ({}): decline it once it is in \
                         EN_REVISION, when the worker cancels {object} at the gateway before the \
                         decline is recorded",
                        seen.state
                    ),
                    None => format!(
                        "is a {} that was sent to the gateway and may still be executing there, \
                         and it is still being checked ({}): decline it once it is in \
                         EN_REVISION, when the worker confirms with the gateway before the \
                         decline is recorded",
                        if seen.is_refund() { "refund" } else { "charge" },
                        seen.state
                    ),
                };
                return Err(ResolveError::OpenAtGateway(format!(
                    "attempt {} {what}",
                    seen.id
                )));
            }
            let mut c = Change::new(Some(Event::ReviewNow), DECLINE_REQUESTED, &actor);
            c.act_in = Some(Duration::ZERO);
            requested = Some(format!("decline requested ({code}): {}", req.note.trim()));
            c
        }
        Resolution::Decline { code } => {
            let mut c = Change::new(Some(Event::Declined), "finance_declined", &actor);
            c.decline_code = Some(code);
            c
        }
        Resolution::CheckNow => {
            let event = (seen.state == State::EnRevision).then_some(Event::Recheck);
            let mut c = Change::new(event, "finance_check_now", &actor);
            c.act_in = Some(Duration::ZERO);
            c
        }
    };
    let evidence = Evidence {
        detail: requested.or(evidence.detail),
        ..evidence
    };
    change.evidence = Some(&evidence);
    match store.apply(&seen, &change).await? {
        Applied::Moved(now) => Ok(*now),
        Applied::Lost => {
            let (now, _) = store.load(req.attempt_id).await?;
            Err(moved(&now, req.version))
        }
    }
}

fn moved(now: &Attempt, looked_at: i64) -> ResolveError {
    ResolveError::Moved(format!(
        "attempt {} changed since you looked at it (version {looked_at}; now version {} in {}): reload it and decide again",
        now.id, now.version, now.state
    ))
}

/// One attempt with everything finance needs to decide: the attempt, its
/// full transition history and its lookups.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Detail {
    pub attempt: Attempt,
    pub transitions: Vec<Transition>,
    pub checks: Vec<crate::store::Check>,
    /// For a refund: the charge it refunds.
    pub refund_of: Option<Attempt>,
}

pub async fn detail(store: &Store, id: Uuid) -> Result<Detail, StoreError> {
    let (attempt, _) = store.load(id).await?;
    let refund_of = match attempt.refund_of {
        Some(charge) => Some(store.load(charge).await?.0),
        None => None,
    };
    Ok(Detail {
        transitions: store.transitions(id).await?,
        checks: store.checks(id).await?,
        attempt,
        refund_of,
    })
}

/// Filters of the queue (all optional), as a person gives them.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Filter {
    /// `EN_REVISION` or `DESCONOCIDO`.
    pub state: Option<String>,
    pub currency: Option<String>,
    /// `charge` or `refund`.
    pub kind: Option<String>,
    /// Only items at least this old, in seconds.
    pub min_age_secs: Option<i64>,
}

impl Filter {
    /// The filters as the store's query; a bad value names its field.
    pub fn query(&self, stale_after: Duration) -> Result<QueueQuery, InputError> {
        let given = |v: &Option<String>| {
            v.as_deref()
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        let state = match given(&self.state).as_deref() {
            None => None,
            Some("EN_REVISION") => Some(State::EnRevision),
            Some("DESCONOCIDO") => Some(State::Desconocido),
            Some(_) => {
                return Err(InputError::new("state", "EN_REVISION or DESCONOCIDO"));
            }
        };
        let currency = match given(&self.currency) {
            None => None,
            Some(c) if c.len() == 3 && c.chars().all(|c| c.is_ascii_alphabetic()) => {
                Some(c.to_ascii_uppercase())
            }
            Some(_) => {
                return Err(InputError::new(
                    "currency",
                    "an ISO 4217 code of 3 letters, e.g. USD",
                ));
            }
        };
        let refunds = match given(&self.kind).as_deref() {
            None => None,
            Some("charge") => Some(false),
            Some("refund") => Some(true),
            Some(_) => return Err(InputError::new("kind", "charge or refund")),
        };
        let min_age = match self.min_age_secs {
            None => Duration::ZERO,
            Some(s) => u64::try_from(s)
                .map(Duration::from_secs)
                .map_err(|_| InputError::new("min_age_secs", "0 or more seconds"))?,
        };
        Ok(QueueQuery {
            stale_after,
            state,
            currency,
            refunds,
            min_age,
        })
    }
}

/// What a bulk "check again now" did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct BulkCheck {
    /// Attempts in review whose next automatic check is now.
    pub scheduled: u64,
    /// In review, but being looked up right now (a worker holds them).
    pub busy: u64,
    /// Changed between the read and the write (settled, or another
    /// person's request): left as they are.
    pub moved: u64,
    /// `DESCONOCIDO` attempts the filters select: not touched, they are
    /// already looked up on their own schedule (seconds apart, or when the
    /// gateway's `Retry-After` allows).
    pub skipped_desconocido: i64,
}

/// Finance's bulk "check again now": every attempt in review the filters
/// select gets its janitor's next check pulled to now, each by a
/// compare-and-set write through the state machine (`ReviewNow`: it stays
/// in review; a transition-log row as `finance:<by>` with the note),
/// processed in pages (no cap).
pub async fn check_now_all(
    store: &Store,
    stale_after: Duration,
    filter: &Filter,
    by: &str,
    note: &str,
) -> Result<BulkCheck, QueueError> {
    validate_person(by, note)?;
    let q = filter.query(stale_after)?;
    let mut out = BulkCheck::default();
    if q.state != Some(State::EnRevision) {
        let doubt = QueueQuery {
            state: Some(State::Desconocido),
            ..q.clone()
        };
        out.skipped_desconocido = store.escalated_count(&doubt).await?;
    }
    if q.state == Some(State::Desconocido) {
        return Ok(out);
    }
    let review = QueueQuery {
        state: Some(State::EnRevision),
        ..q
    };
    let actor = format!("finance:{}", by.trim());
    let evidence = Evidence {
        call: "finance".into(),
        error_kind: "manual".into(),
        detail: Some(note.trim().to_owned()),
        ..Evidence::default()
    };
    const PAGE: i64 = 200;
    let mut after = QueueCursor::start();
    loop {
        let items = store.escalated_page(&review, after, PAGE).await?;
        let Some(last) = items.last() else {
            break;
        };
        after = QueueCursor::after(&last.attempt);
        let full = items.len() as i64 == PAGE;
        let now = store.now().await?;
        for e in items {
            let seen = e.attempt;
            if seen.lease_expires_at.is_some_and(|until| until > now) {
                out.busy += 1;
                continue;
            }
            let mut c = Change::new(Some(Event::ReviewNow), "finance_check_now", &actor);
            c.act_in = Some(Duration::ZERO);
            c.evidence = Some(&evidence);
            match store.apply(&seen, &c).await? {
                Applied::Moved(_) => out.scheduled += 1,
                Applied::Lost => out.moved += 1,
            }
        }
        if !full {
            break;
        }
    }
    Ok(out)
}

/// Closes a reconciliation case once, as `finance:<by>`, with a note.
pub async fn resolve_case(
    store: &Store,
    id: i64,
    by: &str,
    note: &str,
) -> Result<ReconCase, CaseError> {
    validate_person(by, note)?;
    store
        .resolve_case(id, &format!("finance:{}", by.trim()), note)
        .await
}

/// The last gateway evidence of an attempt, as (HTTP status, error kind,
/// lookup result), for lists.
pub fn last_evidence(a: &Attempt) -> (Option<i64>, Option<String>, Option<String>) {
    let Some(ev) = &a.last_evidence else {
        return (None, None, None);
    };
    let text = |k: &str| ev.get(k).and_then(|v| v.as_str()).map(str::to_owned);
    (
        ev.get("http_status").and_then(|v| v.as_i64()),
        text("error_kind"),
        text("lookup_result"),
    )
}
