//! The steps of a compare-and-set write that follow the row's move and are
//! the same on both backends: the customer notice the plan asks for and the
//! check record. Written once, generic over the backend ([`Sql`], which
//! says how it binds ids and times); each backend passes its SQL. The move
//! itself stays per backend (PostgreSQL writes it and its log row in one
//! statement, with group commit; SQLite in two, under its write lock).

use sqlx::{Encode, Type};

use super::change::{Change, CheckRecord, NoticeKind};
use super::values::Sql;
use super::{Attempt, StoreError};

/// The customer notice of kind `kind` about `now` (the attempt as moved):
/// `sql` binds the order, attempt, kind, decline code and, for a scheduled
/// retry, when it is due.
pub(crate) async fn notice<DB: Sql>(
    tx: &mut DB::Connection,
    sql: &'static str,
    now: &Attempt,
    kind: NoticeKind,
) -> Result<(), StoreError>
where
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
{
    let due = now
        .next_action_at
        .filter(|_| kind == NoticeKind::RetryScheduled);
    sqlx::query(sql)
        .bind(now.order_id.as_str())
        .bind(DB::id(now.id))
        .bind(kind.as_str())
        .bind(now.decline_code.as_deref())
        .bind(DB::maybe_at(due))
        .execute(DB::on(tx))
        .await?;
    Ok(())
}

/// The record of the check `change` reports on `now` (the attempt as
/// moved, its check count already raised): `sql` binds the attempt, check
/// number, when it was due and started, the lookup's result (`failed`
/// without evidence), HTTP status, error kind and actor.
pub(crate) async fn check<DB: Sql>(
    tx: &mut DB::Connection,
    sql: &'static str,
    now: &Attempt,
    check: &CheckRecord,
    change: &Change<'_>,
) -> Result<(), StoreError>
where
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
    i32: for<'q> Encode<'q, DB> + Type<DB>,
    Option<i32>: for<'q> Encode<'q, DB> + Type<DB>,
{
    let ev = change.evidence;
    sqlx::query(sql)
        .bind(DB::id(now.id))
        .bind(now.check_count)
        .bind(DB::at(check.scheduled_at))
        .bind(DB::at(check.started_at))
        .bind(
            ev.and_then(|e| e.lookup_result.as_deref())
                .unwrap_or("failed"),
        )
        .bind(ev.and_then(|e| e.http_status).map(i32::from))
        .bind(ev.map(|e| e.error_kind.as_str()))
        .bind(change.actor)
        .execute(DB::on(tx))
        .await?;
    Ok(())
}
