//! Reconciliation in the store, for both backends: the attempts a window's
//! comparison needs, the cases it opens (the escalation queue), their
//! resolution by a person, and the claim that lets one worker of many run
//! each window.
//!
//! Invariant: a case is written once per `dedupe_key` (UNIQUE, `ON CONFLICT
//! DO NOTHING`): a re-run never re-opens or duplicates one, even one already
//! resolved. Resolving is a compare-and-set on `resolved_at IS NULL`: the
//! second resolution of a case is an error that says who resolved it first.
//! A run claim is a compare-and-set too: one holder per window at a time,
//! fenced by its `tries` count.
//!
//! What follows a case's insert is written once here ([`case_written`]),
//! generic over the backend; the insert itself stays in `pg/recon.rs` and
//! `lite/recon.rs` (uuid, JSON and times are stored differently).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{Encode, FromRow, Type};
use uuid::Uuid;

use super::values::Sql;
use super::{Attempt, Db, Store, StoreError, lite, pg};
use crate::domain::InputError;
use crate::domain::{Finding, Window};

/// One row of `recon_cases`: a discrepancy for a person to resolve.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct ReconCase {
    pub id: i64,
    /// `double_charge`, `unmatched_charge`, `unmatched_refund`,
    /// `missing_at_gateway` or `amount_mismatch`.
    pub kind: String,
    pub dedupe_key: String,
    pub order_id: Option<String>,
    pub attempt_id: Option<Uuid>,
    /// The gateway's charge or refund id(s) involved, comma-separated.
    pub gateway_ref: Option<String>,
    /// What each side says (amounts in minor units, states, ids).
    #[schema(value_type = Object)]
    pub details: serde_json::Value,
    pub window_from: DateTime<Utc>,
    pub window_to: DateTime<Utc>,
    pub opened_at: DateTime<Utc>,
    pub resolved_at: Option<DateTime<Utc>>,
    pub resolved_by: Option<String>,
    pub resolution_note: Option<String>,
}

/// Where a page of open cases starts: right after this case in their
/// order (`opened_at`, then `id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaseCursor {
    pub opened_at: DateTime<Utc>,
    pub id: i64,
}

impl CaseCursor {
    /// The cursor right after `c`.
    pub fn after(c: &ReconCase) -> Self {
        Self {
            opened_at: c.opened_at,
            id: c.id,
        }
    }
}

/// What recording a finding did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CaseStatus {
    /// Opened by this run.
    New,
    /// Opened by an earlier run, not resolved yet.
    AlreadyOpen,
    /// Opened by an earlier run and resolved since: not re-opened.
    AlreadyResolved,
}

impl CaseStatus {
    /// A case an earlier run opened, resolved since or not.
    pub(crate) fn existing(resolved: bool) -> Self {
        if resolved {
            CaseStatus::AlreadyResolved
        } else {
            CaseStatus::AlreadyOpen
        }
    }
}

/// A finding as recorded: its case id and whether it is new.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CaseWrite {
    pub id: i64,
    pub dedupe_key: String,
    pub status: CaseStatus,
}

/// Which of our attempts a window's comparison needs besides those created
/// in the window: the ones the gateway's records name.
#[derive(Debug, Clone, Default)]
pub struct ReconScope {
    pub keys: Vec<Uuid>,
    pub gateway_ids: Vec<String>,
    pub orders: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    #[error(transparent)]
    Invalid(#[from] InputError),
    #[error("no reconciliation case with id {0}")]
    NotFound(i64),
    #[error("case {id} was already resolved by {by} at {at}")]
    AlreadyResolved {
        id: i64,
        by: String,
        at: DateTime<Utc>,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for CaseError {
    fn from(e: sqlx::Error) -> Self {
        CaseError::Store(e.into())
    }
}

/// A claimed run of one window; `tries` fences the holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RunClaim {
    pub id: i64,
    pub tries: i32,
}

/// One row of `recon_runs`.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct ReconRun {
    pub id: i64,
    pub window_from: DateTime<Utc>,
    pub window_to: DateTime<Utc>,
    pub claimed_by: String,
    pub claimed_at: DateTime<Utc>,
    pub tries: i32,
    pub finished_at: Option<DateTime<Utc>>,
    /// `ok` or `failed`; `None` while running.
    pub outcome: Option<String>,
    /// The run's report (or `{"error": …}`).
    pub report: Option<serde_json::Value>,
}

impl Store {
    /// Our attempts (charges and refunds) created in `window`, plus every
    /// attempt carrying one of `scope`'s keys, gateway ids or order ids.
    pub async fn recon_attempts(
        &self,
        window: &Window,
        scope: &ReconScope,
    ) -> Result<Vec<Attempt>, StoreError> {
        on_db!(self, recon::attempts(window, scope))
    }

    /// Opens a case for each finding whose dedupe key is new, in one
    /// transaction; the others are left as they are (open or resolved).
    pub async fn record_cases(
        &self,
        window: &Window,
        findings: &[Finding],
    ) -> Result<Vec<CaseWrite>, StoreError> {
        let mut tx = self.begin_write().await?;
        let mut out = Vec::with_capacity(findings.len());
        for f in findings {
            out.push(tx.open_case(window, f).await?);
        }
        tx.commit().await?;
        Ok(out)
    }

    /// The escalation queue's reconciliation cases: unresolved, oldest first.
    pub async fn open_cases(&self) -> Result<Vec<ReconCase>, StoreError> {
        on_db!(self, recon::cases(true))
    }

    /// One page of the open cases, oldest first (then by id), right after
    /// `after` (from the start when `None`), at most `limit`.
    pub async fn open_cases_page(
        &self,
        after: Option<CaseCursor>,
        limit: i64,
    ) -> Result<Vec<ReconCase>, StoreError> {
        on_db!(self, recon::open_page(after, limit))
    }

    /// How many cases are open (a SQL count, not a list).
    pub async fn open_cases_count(&self) -> Result<i64, StoreError> {
        on_db_sql!(self, counts::count[OPEN_CASES]())
    }

    /// Every reconciliation case, resolved or not, oldest first.
    pub async fn all_cases(&self) -> Result<Vec<ReconCase>, StoreError> {
        on_db!(self, recon::cases(false))
    }

    pub async fn recon_case(&self, id: i64) -> Result<Option<ReconCase>, StoreError> {
        on_db!(self, recon::case(id))
    }

    /// Resolves an open case once, with who and a note (both required).
    /// Returns the resolved case; a case already resolved is
    /// [`CaseError::AlreadyResolved`] and is left as it was.
    pub async fn resolve_case(
        &self,
        id: i64,
        by: &str,
        note: &str,
    ) -> Result<ReconCase, CaseError> {
        let (by, note) = (by.trim(), note.trim());
        if by.is_empty() || by.chars().count() > 200 || by.chars().any(char::is_control) {
            return Err(InputError::new(
                "resolved_by",
                "must be 1-200 characters, no control characters",
            )
            .into());
        }
        if note.is_empty() {
            return Err(InputError::new("resolution_note", "must not be empty").into());
        }
        crate::domain::text::note("resolution_note", note, 2000, "a note of what was done")?;
        let resolved = match &self.db {
            Db::Pg(p) => pg::recon::resolve(p, id, by, note).await?,
            Db::Lite(p) => lite::recon::resolve(p, id, by, note).await?,
        };
        if let Some(case) = resolved {
            return Ok(case);
        }
        match self.recon_case(id).await? {
            None => Err(CaseError::NotFound(id)),
            Some(c) => Err(CaseError::AlreadyResolved {
                id,
                by: c.resolved_by.unwrap_or_default(),
                at: c.resolved_at.unwrap_or(c.opened_at),
            }),
        }
    }

    /// Claims the run of `window` for `by`: `None` when it is done, or
    /// running and not yet `stale_after` old, or failed less than
    /// `retry_after` ago.
    pub async fn claim_recon_run(
        &self,
        window: &Window,
        by: &str,
        retry_after: Duration,
        stale_after: Duration,
    ) -> Result<Option<RunClaim>, StoreError> {
        on_db!(self, recon::claim(window, by, retry_after, stale_after))
    }

    /// Records how a claimed run ended; `false` when the claim was taken
    /// over meanwhile (nothing written).
    pub async fn finish_recon_run(
        &self,
        claim: &RunClaim,
        ok: bool,
        report: &serde_json::Value,
    ) -> Result<bool, StoreError> {
        let outcome = if ok { "ok" } else { "failed" };
        on_db!(self, recon::finish(claim, outcome, report))
    }

    /// Every run claimed so far, oldest window first.
    pub async fn recon_runs(&self) -> Result<Vec<ReconRun>, StoreError> {
        on_db!(self, recon::runs())
    }
}

/// The write of finding `f` once its case's insert ran: the id the insert
/// returned (a new case), else the existing case's, which `sql` selects
/// (id, resolved) by dedupe key.
pub(crate) async fn case_written<DB>(
    tx: &mut DB::Connection,
    sql: &'static str,
    f: &Finding,
    new: Option<i64>,
) -> Result<CaseWrite, StoreError>
where
    DB: Sql,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    (i64, bool): for<'r> FromRow<'r, DB::Row>,
{
    let (id, status) = match new {
        Some(id) => (id, CaseStatus::New),
        None => {
            let (id, resolved): (i64, bool) = sqlx::query_as(sql)
                .bind(f.dedupe_key.as_str())
                .fetch_one(DB::on(tx))
                .await?;
            (id, CaseStatus::existing(resolved))
        }
    };
    Ok(CaseWrite {
        id,
        dedupe_key: f.dedupe_key.clone(),
        status,
    })
}
