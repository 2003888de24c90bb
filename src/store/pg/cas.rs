//! The PostgreSQL compare-and-set, for one row or many in one statement,
//! and group commit: a task per process that writes the compare-and-sets of
//! concurrently finishing handlers together (River's batch completer).
//!
//! Each row is still fenced by its own `version` and `state`, and its
//! transition-log row (with the row's new `version`, which the database's
//! `state_change_logged` checks at commit) is written by the same
//! statement, only if it moved.
//! Nothing here decides what to write: every [`Cas`] comes from
//! [`super::super::change::plan`].

use std::collections::VecDeque;

use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use super::super::change::{Change, Plan};
use super::super::{Attempt, StoreError};

/// One compare-and-set, owned (it crosses to the committer task).
#[derive(Debug, Clone)]
pub(crate) struct Cas {
    id: Uuid,
    version: i64,
    from: &'static str,
    to: &'static str,
    charge_id: Option<String>,
    decline_code: Option<String>,
    act_in_secs: Option<f64>,
    lease_owner: Option<String>,
    lease_secs: Option<f64>,
    add_check: i32,
    add_send: i32,
    /// JSON text, cast to `jsonb` by the statement.
    evidence: Option<String>,
    park: bool,
    gateway_ref: Option<String>,
    cancel_reason: Option<String>,
    log: bool,
    cause: String,
    actor: String,
    http_status: Option<i32>,
    error_kind: Option<String>,
    lookup_result: Option<String>,
    /// Counted in the metrics when the row moves.
    metric: Option<(crate::state::State, crate::state::State)>,
}

impl Cas {
    pub(crate) fn new(seen: &Attempt, change: &Change<'_>, plan: &Plan<'_>) -> Self {
        let ev = change.evidence;
        Self {
            id: seen.id,
            version: seen.version,
            from: seen.state.as_str(),
            to: plan.to.as_str(),
            charge_id: change.charge_id.map(str::to_owned),
            decline_code: change.decline_code.map(str::to_owned),
            act_in_secs: plan.act_in_secs,
            lease_owner: plan.lease_owner.map(str::to_owned),
            lease_secs: plan.lease_secs,
            add_check: plan.add_check,
            add_send: plan.add_send,
            evidence: plan.evidence_json.clone(),
            park: plan.park,
            gateway_ref: change.gateway_ref.map(str::to_owned),
            cancel_reason: change.cancel_reason.map(str::to_owned),
            log: plan.log,
            cause: change.cause.to_owned(),
            actor: change.actor.to_owned(),
            http_status: ev.and_then(|e| e.http_status).map(i32::from),
            error_kind: ev.map(|e| e.error_kind.clone()),
            lookup_result: ev.and_then(|e| e.lookup_result.clone()),
            metric: (plan.log && plan.to != seen.state).then_some((seen.state, plan.to)),
        }
    }
}

/// One compare-and-set and its log row, in one statement (a
/// data-modifying CTE: the log row is written only if the row moved).
const MOVE_AND_LOG_ONE: &str = "
WITH moved AS (
    UPDATE cobro.payment_attempts SET
        state = $3,
        version = version + 1,
        updated_at = now(),
        gateway_charge_id = COALESCE($4, gateway_charge_id),
        decline_code = COALESCE($5, decline_code),
        next_action_at = CASE WHEN $6::float8 IS NULL THEN NULL
                              ELSE now() + make_interval(secs => $6::float8) END,
        lease_owner = $7,
        lease_expires_at = CASE WHEN $8::float8 IS NULL THEN NULL
                                ELSE now() + make_interval(secs => $8::float8) END,
        check_count = check_count + $9,
        send_count = send_count + $10,
        last_evidence = COALESCE($11::jsonb, last_evidence),
        parked_since = CASE WHEN $13 THEN COALESCE(parked_since, now()) END,
        gateway_ref = CASE WHEN $14::text IS NULL THEN gateway_ref ELSE $14 END,
        cancel_reason = COALESCE($15, cancel_reason)
     WHERE id = $1 AND version = $2 AND state = $12
    RETURNING *
), logged AS (
    INSERT INTO cobro.attempt_transitions
        (attempt_id, from_state, to_state, cause, actor,
         http_status, error_kind, lookup_result, evidence, version)
    SELECT id, $12, $3, $17, $18, $19, $20, $21, $11::jsonb, version
      FROM moved WHERE $16
)
SELECT * FROM moved";

/// Many compare-and-sets and their log rows in one statement: the rows
/// come in as arrays, one element per compare-and-set. `a.id = ANY($1)`
/// lets the planner go straight to the primary key. Sent unnamed, so it is
/// planned for its own rows each time: a plan cached while the table was
/// small (a generic one, which cannot see how many rows the arrays hold)
/// scans the whole table, and would keep doing so as it grows.
pub(crate) const MOVE_AND_LOG: &str = "
WITH v AS (
    SELECT * FROM unnest($1::uuid[], $2::int8[], $3::text[], $4::text[], $5::text[],
                         $6::text[], $7::float8[], $8::text[], $9::float8[], $10::int4[],
                         $11::int4[], $12::text[], $13::bool[], $14::text[], $15::text[],
                         $16::bool[], $17::text[], $18::text[], $19::int4[], $20::text[],
                         $21::text[])
        AS v(id, version, from_state, to_state, charge_id,
             decline_code, act_in_secs, lease_owner, lease_secs, add_check,
             add_send, evidence, park, gateway_ref, cancel_reason,
             log, cause, actor, http_status, error_kind,
             lookup_result)
), moved AS (
    UPDATE cobro.payment_attempts a SET
        state = v.to_state,
        version = a.version + 1,
        updated_at = now(),
        gateway_charge_id = COALESCE(v.charge_id, a.gateway_charge_id),
        decline_code = COALESCE(v.decline_code, a.decline_code),
        next_action_at = CASE WHEN v.act_in_secs IS NULL THEN NULL
                              ELSE now() + make_interval(secs => v.act_in_secs) END,
        lease_owner = v.lease_owner,
        lease_expires_at = CASE WHEN v.lease_secs IS NULL THEN NULL
                                ELSE now() + make_interval(secs => v.lease_secs) END,
        check_count = a.check_count + v.add_check,
        send_count = a.send_count + v.add_send,
        last_evidence = COALESCE(v.evidence::jsonb, a.last_evidence),
        parked_since = CASE WHEN v.park THEN COALESCE(a.parked_since, now()) END,
        gateway_ref = CASE WHEN v.gateway_ref IS NULL THEN a.gateway_ref ELSE v.gateway_ref END,
        cancel_reason = COALESCE(v.cancel_reason, a.cancel_reason)
      FROM v
     WHERE a.id = ANY($1::uuid[])
       AND a.id = v.id AND a.version = v.version AND a.state = v.from_state
    RETURNING a.*
), logged AS (
    INSERT INTO cobro.attempt_transitions
        (attempt_id, from_state, to_state, cause, actor,
         http_status, error_kind, lookup_result, evidence, version)
    SELECT m.id, v.from_state, v.to_state, v.cause, v.actor,
           v.http_status, v.error_kind, v.lookup_result, v.evidence::jsonb, m.version
      FROM moved m JOIN v ON v.id = m.id
     WHERE v.log
)
SELECT * FROM moved";

/// Writes `rows` (distinct attempts) in one statement: for each, in its
/// order, the new row if it moved, `None` if its compare-and-set lost. A
/// single row takes [`MOVE_AND_LOG_ONE`] (prepared once per connection,
/// its plan a primary-key probe at any table size), more take
/// [`MOVE_AND_LOG`].
pub(crate) async fn move_and_log<'e, E: sqlx::PgExecutor<'e>>(
    db: E,
    rows: &[Cas],
) -> Result<Vec<Option<Attempt>>, StoreError> {
    fn col<T>(rows: &[Cas], f: impl Fn(&Cas) -> T) -> Vec<T> {
        rows.iter().map(f).collect()
    }
    let moved: Vec<Attempt> = if let [c] = rows {
        sqlx::query_as(MOVE_AND_LOG_ONE)
            .bind(c.id)
            .bind(c.version)
            .bind(c.to)
            .bind(c.charge_id.as_deref())
            .bind(c.decline_code.as_deref())
            .bind(c.act_in_secs)
            .bind(c.lease_owner.as_deref())
            .bind(c.lease_secs)
            .bind(c.add_check)
            .bind(c.add_send)
            .bind(c.evidence.as_deref())
            .bind(c.from)
            .bind(c.park)
            .bind(c.gateway_ref.as_deref())
            .bind(c.cancel_reason.as_deref())
            .bind(c.log)
            .bind(&c.cause)
            .bind(&c.actor)
            .bind(c.http_status)
            .bind(c.error_kind.as_deref())
            .bind(c.lookup_result.as_deref())
            .fetch_all(db)
            .await?
    } else {
        sqlx::query_as(MOVE_AND_LOG)
            .persistent(false)
            .bind(col(rows, |c| c.id))
            .bind(col(rows, |c| c.version))
            .bind(col(rows, |c| c.from))
            .bind(col(rows, |c| c.to))
            .bind(col(rows, |c| c.charge_id.clone()))
            .bind(col(rows, |c| c.decline_code.clone()))
            .bind(col(rows, |c| c.act_in_secs))
            .bind(col(rows, |c| c.lease_owner.clone()))
            .bind(col(rows, |c| c.lease_secs))
            .bind(col(rows, |c| c.add_check))
            .bind(col(rows, |c| c.add_send))
            .bind(col(rows, |c| c.evidence.clone()))
            .bind(col(rows, |c| c.park))
            .bind(col(rows, |c| c.gateway_ref.clone()))
            .bind(col(rows, |c| c.cancel_reason.clone()))
            .bind(col(rows, |c| c.log))
            .bind(col(rows, |c| c.cause.clone()))
            .bind(col(rows, |c| c.actor.clone()))
            .bind(col(rows, |c| c.http_status))
            .bind(col(rows, |c| c.error_kind.clone()))
            .bind(col(rows, |c| c.lookup_result.clone()))
            .fetch_all(db)
            .await?
    };
    let mut moved: Vec<Option<Attempt>> = moved.into_iter().map(Some).collect();
    Ok(rows
        .iter()
        .map(|c| {
            let row = moved
                .iter_mut()
                .find(|m| m.as_ref().is_some_and(|m| m.id == c.id))
                .and_then(Option::take);
            if row.is_some()
                && let Some((from, to)) = c.metric
            {
                crate::store::observe::transition_written(from, to, &c.cause);
            }
            row
        })
        .collect())
}

/// [`move_and_log`] for one row: the new row, or `None` if it lost.
pub(crate) async fn move_one<'e, E: sqlx::PgExecutor<'e>>(
    db: E,
    row: &Cas,
) -> Result<Option<Attempt>, StoreError> {
    Ok(move_and_log(db, std::slice::from_ref(row))
        .await?
        .pop()
        .flatten())
}

type Reply = oneshot::Sender<Result<Option<Attempt>, StoreError>>;

/// Group commit: [`GroupCommit::apply`] hands a compare-and-set to one
/// committer task, which writes everything handed to it meanwhile (up to
/// `max` rows) in one statement, then the next batch. One statement at a
/// time: a batch grows while the one before it commits, so under load a
/// handful of statements carry the answers of every handler, and a lone
/// answer waits for nothing. The task ends when the last handle is dropped.
#[derive(Clone)]
pub(crate) struct GroupCommit {
    tx: mpsc::UnboundedSender<(Cas, Reply)>,
}

impl std::fmt::Debug for GroupCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit").finish_non_exhaustive()
    }
}

impl GroupCommit {
    pub(crate) fn start(pool: PgPool, max: usize) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(commit(pool, rx, max.max(1)));
        Self { tx }
    }

    /// Writes `cas` in the next batch: the new row, or `None` if it lost.
    pub(crate) async fn apply(&self, cas: Cas) -> Result<Option<Attempt>, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send((cas, reply))
            .map_err(|_| StoreError::Db(sqlx::Error::WorkerCrashed))?;
        answer
            .await
            .map_err(|_| StoreError::Db(sqlx::Error::WorkerCrashed))?
    }
}

async fn commit(pool: PgPool, mut rx: mpsc::UnboundedReceiver<(Cas, Reply)>, max: usize) {
    // Two writes of one attempt never share a statement (the second would
    // lose against the first's version): it waits for the next batch.
    let mut later: VecDeque<(Cas, Reply)> = VecDeque::new();
    loop {
        let mut batch: Vec<(Cas, Reply)> = Vec::new();
        let mut deferred = VecDeque::new();
        while batch.len() < max {
            let next = match later.pop_front() {
                Some(j) => j,
                None if batch.is_empty() => match rx.recv().await {
                    Some(j) => j,
                    None => return,
                },
                None => match rx.try_recv() {
                    Ok(j) => j,
                    Err(_) => break,
                },
            };
            if batch.iter().any(|(c, _)| c.id == next.0.id) {
                deferred.push_back(next);
            } else {
                batch.push(next);
            }
        }
        later.extend(deferred);
        // Never empty: the first write taken always joins the batch.
        let (rows, replies): (Vec<Cas>, Vec<Reply>) = batch.into_iter().unzip();
        match move_and_log(&pool, &rows).await {
            Ok(moved) => {
                for (reply, row) in replies.into_iter().zip(moved) {
                    let _ = reply.send(Ok(row));
                }
            }
            // The statement failed as a whole (one row refused by a
            // trigger, say): each row again on its own, so an error is its
            // own row's alone.
            Err(_) if rows.len() > 1 => {
                for (cas, reply) in rows.iter().zip(replies) {
                    let _ = reply.send(move_one(&pool, cas).await);
                }
            }
            Err(e) => {
                if let Some(reply) = replies.into_iter().next() {
                    let _ = reply.send(Err(e));
                }
            }
        }
    }
}
