//! The store: every SQL statement cobro runs lives under `src/store/`, one
//! module per backend (`pg/` for PostgreSQL, `lite/` for SQLite). The
//! `Store` methods are the backend-neutral API; a method whose two
//! backends differ only in SQL is one line, [`on_db!`]; a flow of several
//! steps inside one transaction is written once over `tx::Tx`; a step whose
//! Rust around the SQL is the same on both is written once, generic over
//! `values::Sql`, each backend passing its SQL.
//!
//! Invariant: every write to an attempt is a compare-and-set on its `version`
//! (the fencing token) and expected state; zero rows is "someone else won",
//! reported as [`Applied::Lost`], never an error. A state change and its
//! transition-log row (and the wake-up job it schedules) commit together.
//! What to write is decided once in [`change`]; the backends differ only in
//! SQL. Bound parameters only; no SQL is built with `format!`.

/// Calls the backend's own function with its pool:
/// `on_db!(self, recon::cases(open_only))` is
/// `pg::recon::cases(pool, open_only).await` on PostgreSQL and
/// `lite::recon::cases(pool, open_only).await` on SQLite.
/// [`on_db!`] for a read written once for both databases (generic over the
/// backend, in `store::$m`) with the SQL its backend holds:
/// `on_db_sql!(store, webhooks::counts[COUNTS]())` calls
/// `webhooks::counts(pool, pg::webhooks::COUNTS)` or the SQLite twin.
macro_rules! on_db_sql {
    ($store:expr, $m:ident :: $step:ident [$($sql:ident),+] ( $($arg:expr),* $(,)? )) => {
        match &$store.db {
            $crate::store::Db::Pg(p) => {
                $crate::store::$m::$step(p, $($crate::store::pg::$m::$sql,)+ $($arg),*).await
            }
            $crate::store::Db::Lite(p) => {
                $crate::store::$m::$step(p, $($crate::store::lite::$m::$sql,)+ $($arg),*).await
            }
        }
    };
}

macro_rules! on_db {
    ($store:expr, $($step:ident)::+ ( $($arg:expr),* $(,)? )) => {
        match &$store.db {
            $crate::store::Db::Pg(p) => $crate::store::pg::$($step)::+(p, $($arg),*).await,
            $crate::store::Db::Lite(p) => $crate::store::lite::$($step)::+(p, $($arg),*).await,
        }
    };
}

mod apply;
mod breaker;
mod cancel;
pub(crate) mod caps;
mod card_updated;
mod change;
mod contradiction;
mod counts;
mod duplicate;
mod enqueue;
mod escalation;
mod gate;
mod listing;
mod lite;
pub(crate) use lite::wakeups as lite_wakeups;
mod metrics;
mod notices;
mod observe;
mod pause;
mod payment_method;
mod pg;
mod poison;
mod recon;
mod refund;
mod retention;
mod retry;
mod review;
mod schema;
mod settings;
mod settlement;
mod tx;
mod values;
mod webhooks;

pub use breaker::{BreakerEvent, BreakerRow, GatewayHealth};
pub use cancel::{CancelError, CancelReason, Cancelled};
pub use caps::{BadOverrideReason, CardCaps, MAX_OVERRIDE_REASON, OverrideReason};
pub use change::{Applied, Change, CheckRecord, Lease, NoticeKind};
pub use contradiction::{Contradiction, Marked, RefundMark};
pub use enqueue::{EnqueueError, Enqueued};
pub use escalation::{Escalated, QueueCursor, QueueQuery, Totals};
pub(crate) use gate::invalid_from_message;
pub use gate::{Hold, send_held};
pub use listing::{AttemptFilter, AttemptKind};
pub use lite::enqueue_charge as enqueue_charge_sqlite;
pub use metrics::{Gauges, OnCall, RetryOutcome, RetryTally};
pub use notices::{Outgoing, TryOutcome};
pub use observe::{TransitionReport, on_transition};
pub use pause::PauseState;
pub use payment_method::{MethodUpdateError, MethodUpdated};
pub use pg::enqueue_charge;
pub use poison::WakeFailure;
pub use recon::{
    CaseCursor, CaseError, CaseStatus, CaseWrite, ReconCase, ReconRun, ReconScope, RunClaim,
};
pub use refund::{RefundError, Refunded};
pub use retention::{PURGE_BATCH, Purged};
pub use retry::{Retried, RetryError, RetryRequested};
pub use schema::{AppliedMigration, MIGRATE_HINT, Readiness, Scheme, described, is_missing_schema};
pub use settings::Settings;
pub use settlement::SettlementTotal;
pub use webhooks::{EventOutcome, IncomingEvent, Said, WebhookResult};

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgPool, SqlitePool};
use uuid::Uuid;

use crate::domain::ChargeRequest;
use crate::state::{InvalidTransition, State};

/// The apalis queue that carries wake-up jobs for charge attempts.
pub const CHARGE_QUEUE: &str = "cobro.charge";
/// The apalis queue that carries wake-up jobs for refunds.
pub const REFUND_QUEUE: &str = "cobro.refund";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{}", described(.0))]
    /// Not a `#[source]`: the message already words the driver's error,
    /// and a chain printed with `{:#}` would say it twice.
    Db(sqlx::Error),
    /// The first connection failed: where, and why (never the password).
    #[error("cannot connect to the database at {at} (DATABASE_URL): {cause}")]
    Unreachable { at: String, cause: String },
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("apalis setup failed: {0}")]
    Apalis(String),
    #[error("SQLite migration lock {}: {source}", path.display())]
    MigrationLock {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Invalid(#[from] InvalidTransition),
    #[error("no attempt with id {0}")]
    NotFound(Uuid),
    /// Holds the scheme alone (the rest of a URL may hold a password).
    #[error("DATABASE_URL must start with postgres://, postgresql:// or sqlite://; got {0}")]
    UnknownScheme(String),
    #[error("stored row is corrupt: {0}")]
    Corrupt(String),
}

/// One charge attempt, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Attempt {
    pub id: Uuid,
    pub order_id: String,
    pub amount_minor: i64,
    pub currency: String,
    pub payment_method: Option<String>,
    /// The gateway's customer the payment method belongs to (Stripe: `cus_…`).
    pub customer: Option<String>,
    pub idempotency_key: Uuid,
    #[sqlx(try_from = "String")]
    pub state: State,
    /// `initial`, `business_retry` or `refund`.
    pub kind: String,
    /// For a refund: the APROBADO charge attempt it refunds.
    pub refund_of: Option<Uuid>,
    pub attempt_number: i32,
    pub gateway_charge_id: Option<String>,
    pub decline_code: Option<String>,
    pub check_count: i32,
    pub send_count: i32,
    pub next_action_at: Option<DateTime<Utc>>,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub version: i64,
    #[schema(value_type = Option<Object>)]
    pub last_evidence: Option<serde_json::Value>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Set while the attempt waits for an unreachable gateway (the
    /// breaker parked it): no due time, no lease, state and checks kept.
    pub parked_since: Option<DateTime<Utc>>,
    /// A two-step gateway's own object for this attempt (Stripe: the
    /// PaymentIntent), recorded once before anything confirms it.
    pub gateway_ref: Option<String>,
    /// Why the app or finance cancelled it (RECHAZADO only).
    pub cancel_reason: Option<String>,
    /// For the refund of a duplicate that exists only at the gateway (a
    /// `double_charge` case): the duplicate's gateway id, which the refund
    /// is sent against; `refund_of` is then the order's APROBADO charge.
    pub refund_of_gateway: Option<String>,
}

impl Attempt {
    pub fn is_refund(&self) -> bool {
        self.kind == "refund"
    }
}

/// One row of the append-only transition log.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Transition {
    pub id: i64,
    pub attempt_id: Uuid,
    pub from_state: Option<String>,
    pub to_state: String,
    pub cause: String,
    pub actor: String,
    pub http_status: Option<i32>,
    pub error_kind: Option<String>,
    pub lookup_result: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub evidence: Option<serde_json::Value>,
    pub at: DateTime<Utc>,
}

/// One lookup of an attempt in `DESCONOCIDO`.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Check {
    pub attempt_id: Uuid,
    pub check_number: i32,
    pub scheduled_at: DateTime<Utc>,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub lookup_result: String,
    pub http_status: Option<i32>,
    pub error_kind: Option<String>,
    pub actor: String,
}

/// A customer notice in the outbox.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Notice {
    pub id: i64,
    pub order_id: String,
    pub attempt_id: Uuid,
    /// `retry_scheduled`, `payment_failed` or `approved_after_retry`.
    pub kind: String,
    pub decline_code: Option<String>,
    pub next_retry_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub acked_at: Option<DateTime<Utc>>,
    /// Who acknowledged it: the app (`cobro notices --ack … --by`) or
    /// `delivery` (the app's URL answered 2xx).
    pub acked_by: Option<String>,
    /// Delivery to `COBRO_NOTICE_URL` ([`crate::notify`]): tries recorded,
    /// when the next is due, the last answer, and how it ended.
    pub delivery_attempts: i32,
    pub next_delivery_at: Option<DateTime<Utc>>,
    pub last_status: Option<i32>,
    pub last_error: Option<String>,
    pub delivered_at: Option<DateTime<Utc>>,
    /// The last try of the schedule failed too.
    pub failed_at: Option<DateTime<Utc>>,
}

/// Which database the store talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Postgres,
    Sqlite,
}

#[derive(Clone, Debug)]
enum Db {
    Pg(PgPool),
    Lite(SqlitePool),
}

/// A handle on the database (a connection pool). `Debug` shows the backend,
/// never the URL (it may hold a password).
#[derive(Clone)]
pub struct Store {
    db: Db,
    url: String,
    /// PostgreSQL group commit ([`Store::with_group_commit`]), or `None`:
    /// each write its own statement.
    group: Option<pg::cas::GroupCommit>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("backend", &self.backend())
            .field("group_commit", &self.group.is_some())
            .finish_non_exhaustive()
    }
}

/// The engine's decision, made while a wake-up is fetched, to claim the
/// attempt the wake-up names in the fetch's own transaction: the claim
/// [`Change`] it would otherwise write as its handler's first step, or
/// `None` (the handler decides as usual). The wake-up backend only applies
/// what this returns, through the same plan and compare-and-set as
/// [`Store::apply`].
pub trait ClaimPlan: Send + Sync {
    /// The claim for `seen` (read at the database's `now`), if the engine
    /// would send it right away.
    fn claim_for<'a>(&'a self, seen: &Attempt, now: DateTime<Utc>) -> Option<Change<'a>>;
    /// The change that gives back a claim of [`ClaimPlan::claim_for`]
    /// never sent (the worker shut down first): due again at once.
    fn unclaim(&self) -> Change<'_>;
}

impl Store {
    /// `postgres://…` (production, many workers on many machines) or
    /// `sqlite://path` (the embedded default; created when missing).
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, StoreError> {
        let db = match schema::scheme(url)? {
            Scheme::Postgres => Db::Pg(pg::connect(url, max_connections).await?),
            Scheme::Sqlite => Db::Lite(lite::connect(url, max_connections).await?),
        };
        Ok(Self {
            db,
            url: url.to_owned(),
            group: None,
        })
    }

    /// Group commit on PostgreSQL: the compare-and-sets of this handle's
    /// clones that write only the row and its log (the answers, most
    /// writes) go to one task, which writes those that are ready together,
    /// up to `max_batch` in one statement, each fenced by its own version.
    /// SQLite is unchanged (one writer at a time, nothing to coalesce).
    /// Needs a tokio runtime.
    pub fn with_group_commit(mut self, max_batch: usize) -> Self {
        if let Db::Pg(p) = &self.db {
            self.group = Some(pg::cas::GroupCommit::start(p.clone(), max_batch));
        }
        self
    }

    pub fn backend(&self) -> Backend {
        match self.db {
            Db::Pg(_) => Backend::Postgres,
            Db::Lite(_) => Backend::Sqlite,
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn pg_pool(&self) -> Option<&PgPool> {
        match &self.db {
            Db::Pg(p) => Some(p),
            Db::Lite(_) => None,
        }
    }

    pub fn sqlite_pool(&self) -> Option<&SqlitePool> {
        match &self.db {
            Db::Lite(p) => Some(p),
            Db::Pg(_) => None,
        }
    }

    pub async fn close(&self) {
        match &self.db {
            Db::Pg(p) => p.close().await,
            Db::Lite(p) => p.close().await,
        }
    }

    /// Creates or upgrades apalis' tables, then cobro's (each with its own
    /// migrations table so the two histories never collide). Returns
    /// cobro's migrations this run applied (empty: already up to date).
    pub async fn migrate(&self) -> Result<Vec<AppliedMigration>, StoreError> {
        match &self.db {
            Db::Pg(p) => pg::migrate(p).await,
            Db::Lite(_) => lite::migrate(&self.url).await,
        }
    }

    /// Enqueues one charge in its own transaction (the CLI's way; an app
    /// uses [`enqueue_charge`] inside its own transaction instead).
    pub async fn enqueue(&self, req: &ChargeRequest) -> Result<Enqueued, EnqueueError> {
        self.enqueue_as(req, "app").await
    }

    /// [`Store::enqueue`] on behalf of `actor` (e.g. `api:<key name>`), who
    /// is recorded in the attempt's first transition-log row.
    pub async fn enqueue_as(
        &self,
        req: &ChargeRequest,
        actor: &str,
    ) -> Result<Enqueued, EnqueueError> {
        match &self.db {
            Db::Pg(p) => {
                let mut tx = p.begin().await?;
                let out = pg::enqueue_charge_as(&mut tx, req, actor).await?;
                tx.commit().await?;
                Ok(out)
            }
            Db::Lite(p) => {
                let mut tx = p.begin_with("BEGIN IMMEDIATE").await?;
                let out = lite::enqueue::enqueue_charge_as(&mut tx, req, actor).await?;
                tx.commit().await?;
                Ok(out)
            }
        }
    }

    /// The attempt and the database's clock, read together.
    pub async fn load(&self, id: Uuid) -> Result<(Attempt, DateTime<Utc>), StoreError> {
        let found = match &self.db {
            Db::Pg(p) => pg::load(p, id).await?,
            Db::Lite(p) => lite::load(p, id).await?,
        };
        found.ok_or(StoreError::NotFound(id))
    }

    /// The database's clock: the one every schedule, lease, claim and age
    /// in cobro is measured by (workers on many machines share it; their
    /// own clocks may drift).
    pub async fn now(&self) -> Result<DateTime<Utc>, StoreError> {
        on_db!(self, now())
    }

    /// The compare-and-set write. See the module docs.
    pub async fn apply(&self, seen: &Attempt, change: &Change<'_>) -> Result<Applied, StoreError> {
        let plan = change::plan(seen, change)?;
        match &self.db {
            Db::Pg(p) => pg::apply(p, self.group.as_ref(), seen, change, &plan).await,
            Db::Lite(p) => lite::apply(p, seen, change, &plan).await,
        }
    }

    /// The compare-and-set write inside a PostgreSQL transaction of the
    /// caller's (the wake-up fetch's claim, [`ClaimPlan`]).
    pub(crate) async fn apply_in_pg(
        tx: &mut sqlx::PgConnection,
        seen: &Attempt,
        change: &Change<'_>,
    ) -> Result<Applied, StoreError> {
        let plan = change::plan(seen, change)?;
        pg::apply_tx(tx, seen, change, &plan).await
    }

    /// [`Store::apply_in_pg`] for several distinct attempts at once: the
    /// writes that are the row and its log alone share one statement.
    /// Each item is the state machine's to refuse on its own (`Err` in its
    /// place, nothing run for it); a database error fails them all.
    pub(crate) async fn apply_all_in_pg(
        tx: &mut sqlx::PgConnection,
        items: &[(&Attempt, &Change<'_>)],
    ) -> Result<Vec<Result<Applied, StoreError>>, StoreError> {
        let plans: Vec<_> = items
            .iter()
            .map(|(seen, c)| change::plan(seen, c))
            .collect();
        let ok: Vec<_> = items
            .iter()
            .zip(&plans)
            .filter_map(|((seen, c), p)| p.as_ref().ok().map(|p| (*seen, *c, p)))
            .collect();
        let mut applied = pg::apply_all_tx(tx, &ok).await?.into_iter();
        Ok(plans
            .into_iter()
            .map(|p| match p {
                Ok(_) => Ok(applied.next().expect("one result per planned write")),
                Err(e) => Err(e.into()),
            })
            .collect())
    }

    /// Pushes one more wake-up job for an attempt, due now. Harmless at any
    /// time: the handler re-reads the attempt and decides.
    pub async fn wake(&self, id: Uuid) -> Result<(), StoreError> {
        match &self.db {
            Db::Pg(p) => pg::wake(p, id).await,
            Db::Lite(p) => {
                let mut conn = p.acquire().await?;
                lite::push_wake(&mut conn, id, Utc::now(), 0).await
            }
        }
    }

    /// Re-creates wake-ups for attempts whose time has passed: a lease that
    /// expired (the holder vanished: `EN_PROCESO`, or a check in
    /// `DESCONOCIDO`) at once, and `PENDIENTE`/`DESCONOCIDO` (or a
    /// `RECHAZADO` with a business retry due) with no holder
    /// only once they are `grace` late (their own scheduled job normally
    /// comes, even behind a backlog; the sweeper is the backstop for a lost
    /// one). An attempt is re-woken at most once per `every`. Returns how many.
    pub async fn sweep(
        &self,
        grace: Duration,
        every: Duration,
        limit: i64,
    ) -> Result<u64, StoreError> {
        on_db!(self, sweep(grace, every, limit))
    }

    pub async fn attempts_for_order(&self, order_id: &str) -> Result<Vec<Attempt>, StoreError> {
        on_db!(self, attempts_for_order(order_id))
    }

    pub async fn transitions(&self, attempt_id: Uuid) -> Result<Vec<Transition>, StoreError> {
        on_db!(self, transitions(attempt_id))
    }

    pub async fn checks(&self, attempt_id: Uuid) -> Result<Vec<Check>, StoreError> {
        on_db!(self, checks(attempt_id))
    }

    /// Counts of attempts per state.
    pub async fn count_by_state(&self) -> Result<Vec<(State, i64)>, StoreError> {
        self.count_by_state_of_orders("").await
    }

    /// Counts of attempts per state, of orders whose id starts with `prefix`.
    pub async fn count_by_state_of_orders(
        &self,
        prefix: &str,
    ) -> Result<Vec<(State, i64)>, StoreError> {
        let rows = on_db_sql!(self, counts::by_state[BY_STATE](prefix))?;
        rows.into_iter()
            .map(|(s, n)| {
                s.parse::<State>()
                    .map(|st| (st, n))
                    .map_err(|e| StoreError::Corrupt(e.to_string()))
            })
            .collect()
    }

    /// Wake-up jobs not yet finished (pending, queued or running).
    pub async fn open_wakeups(&self) -> Result<i64, StoreError> {
        on_db_sql!(self, counts::count[OPEN_WAKEUPS]())
    }

    /// Transition-log rows in the whole database.
    pub async fn transition_rows(&self) -> Result<i64, StoreError> {
        on_db_sql!(self, counts::count[TRANSITION_ROWS]())
    }

    /// Checks the database answers (for `/health`).
    pub async fn ping(&self) -> Result<(), StoreError> {
        match &self.db {
            Db::Pg(p) => sqlx::query("SELECT 1").execute(p).await.map(|_| ())?,
            Db::Lite(p) => sqlx::query("SELECT 1").execute(p).await.map(|_| ())?,
        }
        Ok(())
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::Db(e)
    }
}
