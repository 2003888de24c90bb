//! The two backends as the steps written once see them: a step generic over
//! [`Sql`] takes each backend's SQL and runs the same Rust around it.
//! PostgreSQL binds a uuid and a timestamptz as they are; SQLite binds
//! hyphenated text and milliseconds since the epoch.

use chrono::{DateTime, Utc};
use sqlx::{
    Database, Encode, Executor, IntoArguments, PgConnection, Postgres, Sqlite, SqliteConnection,
    Type,
};
use uuid::Uuid;

/// What a shared step needs of a backend beyond sqlx's [`Database`]: its
/// connection as an executor, and how it binds an id and a time.
pub(crate) trait Sql: Database<Arguments: IntoArguments<Self>> {
    /// An attempt id as bound.
    type Id: for<'q> Encode<'q, Self> + Type<Self> + Send + 'static;
    /// A time as bound.
    type At: for<'q> Encode<'q, Self> + Type<Self> + Send + 'static;
    /// A time that may be missing, as bound (NULL when it is).
    type MaybeAt: for<'q> Encode<'q, Self> + Type<Self> + Send + 'static;
    fn id(id: Uuid) -> Self::Id;
    fn at(t: DateTime<Utc>) -> Self::At;
    fn maybe_at(t: Option<DateTime<Utc>>) -> Self::MaybeAt;
    /// The connection, to run a query on.
    fn on(conn: &mut Self::Connection) -> impl Executor<'_, Database = Self>;
}

impl Sql for Postgres {
    type Id = Uuid;
    type At = DateTime<Utc>;
    type MaybeAt = Option<DateTime<Utc>>;
    fn id(id: Uuid) -> Uuid {
        id
    }
    fn at(t: DateTime<Utc>) -> DateTime<Utc> {
        t
    }
    fn maybe_at(t: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
        t
    }
    fn on(conn: &mut PgConnection) -> impl Executor<'_, Database = Self> {
        conn
    }
}

impl Sql for Sqlite {
    type Id = String;
    type At = i64;
    type MaybeAt = Option<i64>;
    fn id(id: Uuid) -> String {
        id.hyphenated().to_string()
    }
    fn at(t: DateTime<Utc>) -> i64 {
        t.timestamp_millis()
    }
    fn maybe_at(t: Option<DateTime<Utc>>) -> Option<i64> {
        t.map(Self::at)
    }
    fn on(conn: &mut SqliteConnection) -> impl Executor<'_, Database = Self> {
        conn
    }
}
