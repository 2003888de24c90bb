//! The store: every SQL statement cobro runs lives under `src/store/`.
//!
//! Invariant: every write to an attempt is a compare-and-set on its `version`
//! (the fencing token) and expected state; zero rows is "someone else won",
//! reported as [`Applied::Lost`], never an error. A state change and its
//! transition-log row (and the wake-up job it schedules) commit together.
//! Bound parameters only; no SQL is built with `format!`.

mod attempts;
mod enqueue;

pub use attempts::{Applied, Change, CheckRecord, Lease};
pub use enqueue::{EnqueueError, Enqueued, enqueue_charge};

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use uuid::Uuid;

use crate::state::{InvalidTransition, State};

/// The apalis queue that carries wake-up jobs for charge attempts.
pub const CHARGE_QUEUE: &str = "cobro.charge";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("apalis setup failed: {0}")]
    Apalis(#[from] apalis_postgres::Error),
    #[error(transparent)]
    Invalid(#[from] InvalidTransition),
    #[error("no attempt with id {0}")]
    NotFound(Uuid),
}

/// One charge attempt, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Attempt {
    pub id: Uuid,
    pub order_id: String,
    pub amount_minor: i64,
    pub currency: String,
    pub payment_method: Option<String>,
    pub idempotency_key: Uuid,
    #[sqlx(try_from = "String")]
    pub state: State,
    pub kind: String,
    pub attempt_number: i32,
    pub gateway_charge_id: Option<String>,
    pub decline_code: Option<String>,
    pub check_count: i32,
    pub send_count: i32,
    pub next_action_at: Option<DateTime<Utc>>,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub version: i64,
    pub last_evidence: Option<serde_json::Value>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// One row of the append-only transition log.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
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
    pub evidence: Option<serde_json::Value>,
    pub at: DateTime<Utc>,
}

/// One lookup of an attempt in `DESCONOCIDO`.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
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

/// A handle on the PostgreSQL database (pool).
#[derive(Clone, Debug)]
pub struct Store {
    pool: PgPool,
}

impl Store {
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(std::time::Duration::from_secs(10))
            .connect(url)
            .await?;
        Ok(Self { pool })
    }

    pub fn from_pool(pool: PgPool) -> Self {
        Self { pool }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Creates or upgrades apalis' tables, then cobro's (schema `cobro`, with
    /// its own migrations table so the two histories never collide).
    pub async fn migrate(&self) -> Result<(), StoreError> {
        apalis_postgres::PostgresStorage::setup(&self.pool).await?;
        let mut migrator = sqlx::migrate!("./migrations");
        migrator.create_schema("cobro");
        migrator.dangerous_set_table_name("cobro._migrations");
        migrator.run(&self.pool).await?;
        Ok(())
    }

    /// Enqueues one charge in its own transaction (the CLI's way; an app
    /// uses [`enqueue_charge`] inside its own transaction instead).
    pub async fn enqueue(
        &self,
        req: &crate::domain::ChargeRequest,
    ) -> Result<Enqueued, EnqueueError> {
        let mut tx = self.pool.begin().await?;
        let out = enqueue_charge(&mut tx, req).await?;
        tx.commit().await?;
        Ok(out)
    }
}
