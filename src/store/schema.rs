//! The first contact with a database, and the schema's state: the URL's
//! scheme checked before anything else; one direct connection that says why
//! a PostgreSQL server cannot be used (host, port and the cause: refused,
//! unknown host, authentication, no such database); what `cobro migrate`
//! applied; whether the schema matches this binary's migrations; and the one
//! wording of "a table is missing: run `cobro migrate`" that every error of
//! the store goes through.
//!
//! Invariant: no message here shows a password; every message about a
//! missing or older schema names `cobro migrate`.

use std::time::Duration;

use serde::Serialize;
use sqlx::migrate::Migrator;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection, PgPool, SqlitePool};

use super::StoreError;

/// What a person does about a missing or older schema.
pub const MIGRATE_HINT: &str = "run `cobro migrate` with the same DATABASE_URL";

/// How long the first connection may take before the server is reported
/// unreachable (a dropped SYN, a firewall): far less than the pool's wait.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The database a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Postgres,
    Sqlite,
}

/// The URL's scheme, checked before anything else is read from it. The
/// error shows the scheme alone: the rest may hold a password.
pub fn scheme(url: &str) -> Result<Scheme, StoreError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(Scheme::Postgres);
    }
    if url.starts_with("sqlite:") {
        return Ok(Scheme::Sqlite);
    }
    // Only a prefix made of a scheme's characters is shown: `user:pass@…`
    // before a later `://` (a URL missing its scheme) is not a scheme.
    let is_scheme = |s: &str| {
        s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && s.len() <= 32
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
    };
    let got = match url.split_once("://") {
        Some((scheme, _)) if is_scheme(scheme) => format!("{scheme}://"),
        None if url.trim().is_empty() => "an empty value".to_owned(),
        _ => "a value without a scheme".to_owned(),
    };
    Err(StoreError::UnknownScheme(got))
}

/// This binary's migrations of cobro's own tables.
pub(super) fn pg_migrator() -> Migrator {
    let mut migrator = sqlx::migrate!("./migrations/postgres");
    migrator.create_schema("cobro");
    migrator.dangerous_set_table_name("cobro._migrations");
    migrator
}

pub(super) fn sqlite_migrator() -> Migrator {
    let mut migrator = sqlx::migrate!("./migrations/sqlite");
    migrator.dangerous_set_table_name("_cobro_migrations");
    migrator
}

/// One migration `cobro migrate` applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AppliedMigration {
    pub version: i64,
    pub description: String,
}

/// Whether the schema is the one this binary was built for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "schema", rename_all = "snake_case")]
pub enum Readiness {
    Ready,
    /// No cobro migrations table: never migrated.
    Missing,
    /// Migrated by an older cobro: these versions are not applied yet.
    Behind {
        pending: Vec<i64>,
    },
}

impl Readiness {
    pub fn is_ready(&self) -> bool {
        *self == Readiness::Ready
    }

    /// A sentence for a person: `None` when ready.
    pub fn problem(&self) -> Option<String> {
        match self {
            Readiness::Ready => None,
            Readiness::Missing => Some(format!(
                "the database has no cobro schema (never migrated): {MIGRATE_HINT}"
            )),
            Readiness::Behind { pending } => Some(format!(
                "the database schema is older than this cobro ({} migration(s) not applied): {MIGRATE_HINT}",
                pending.len()
            )),
        }
    }

    /// Compares the versions applied (`None`: no migrations table) with
    /// the binary's.
    pub(super) fn of(applied: Option<&[i64]>, migrator: &Migrator) -> Self {
        let Some(applied) = applied else {
            return Readiness::Missing;
        };
        let pending: Vec<i64> = migrator
            .iter()
            .filter(|m| m.migration_type.is_up_migration())
            .map(|m| m.version)
            .filter(|v| !applied.contains(v))
            .collect();
        match pending.is_empty() {
            true => Readiness::Ready,
            false => Readiness::Behind { pending },
        }
    }
}

/// The migrations of `migrator` not in `before`, in order.
pub(super) fn newly_applied(before: &[i64], migrator: &Migrator) -> Vec<AppliedMigration> {
    migrator
        .iter()
        .filter(|m| m.migration_type.is_up_migration() && !before.contains(&m.version))
        .map(|m| AppliedMigration {
            version: m.version,
            description: m.description.to_string(),
        })
        .collect()
}

/// The versions applied on PostgreSQL; `None` when never migrated.
pub(super) async fn pg_applied(pool: &PgPool) -> Result<Option<Vec<i64>>, StoreError> {
    let rows = sqlx::query_scalar("SELECT version FROM cobro._migrations WHERE success")
        .fetch_all(pool)
        .await;
    missing_is_none(rows)
}

/// The versions applied on SQLite; `None` when never migrated.
pub(super) async fn sqlite_applied(pool: &SqlitePool) -> Result<Option<Vec<i64>>, StoreError> {
    let rows = sqlx::query_scalar("SELECT version FROM _cobro_migrations WHERE success")
        .fetch_all(pool)
        .await;
    missing_is_none(rows)
}

fn missing_is_none(rows: Result<Vec<i64>, sqlx::Error>) -> Result<Option<Vec<i64>>, StoreError> {
    match rows {
        Ok(v) => Ok(Some(v)),
        Err(e) if is_missing_schema(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// A table, schema, function or column this binary expects is not there:
/// PostgreSQL's undefined_table (42P01), invalid_schema_name (3F000),
/// undefined_function (42883) and undefined_column (42703); SQLite's "no
/// such table/column/function".
pub fn is_missing_schema(e: &sqlx::Error) -> bool {
    let Some(db) = e.as_database_error() else {
        return false;
    };
    if matches!(
        db.code().as_deref(),
        Some("42P01" | "3F000" | "42883" | "42703")
    ) {
        return true;
    }
    let m = db.message();
    m.starts_with("no such table")
        || m.starts_with("no such column")
        || m.contains("no such function")
}

/// How every database error of the store reads: a missing schema names
/// `cobro migrate`; anything else is the driver's words.
pub fn described(e: &sqlx::Error) -> String {
    match (is_missing_schema(e), e.as_database_error()) {
        (true, Some(db)) => format!(
            "the database schema is missing or older than this cobro ({}): {MIGRATE_HINT}",
            db.message()
        ),
        _ => format!("database error: {e}"),
    }
}

impl super::StoreError {
    /// The database lacks a table, function or column this binary needs:
    /// the fix is `cobro migrate`, not a retry.
    pub fn is_missing_schema(&self) -> bool {
        matches!(self, super::StoreError::Db(e) if is_missing_schema(e))
    }
}

impl super::Store {
    /// Whether the schema is the one this binary was built for: cobro's
    /// applied migrations against the binary's ([`Readiness`]).
    pub async fn readiness(&self) -> Result<Readiness, StoreError> {
        Ok(match &self.db {
            super::Db::Pg(p) => Readiness::of(pg_applied(p).await?.as_deref(), &pg_migrator()),
            super::Db::Lite(p) => {
                Readiness::of(sqlite_applied(p).await?.as_deref(), &sqlite_migrator())
            }
        })
    }
}

/// One direct connection to the server, within [`PROBE_TIMEOUT`], so that
/// a server that cannot be used is reported at once with where and why,
/// instead of a pool's "timed out" after its wait.
pub(super) async fn probe_pg(opts: &PgConnectOptions) -> Result<(), StoreError> {
    let unreachable = |cause: String| StoreError::Unreachable {
        at: format!("{}:{}", opts.get_host(), opts.get_port()),
        cause,
    };
    match tokio::time::timeout(PROBE_TIMEOUT, PgConnection::connect_with(opts)).await {
        Err(_) => Err(unreachable(format!(
            "no answer within {} s (a firewall, or the wrong host or port?)",
            PROBE_TIMEOUT.as_secs()
        ))),
        Ok(Err(e)) => Err(unreachable(cause(&e, opts))),
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            Ok(())
        }
    }
}

/// Why a connection failed, in a person's words.
fn cause(e: &sqlx::Error, opts: &PgConnectOptions) -> String {
    match e {
        sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
            "connection refused (is PostgreSQL running and listening on that port?)".to_owned()
        }
        sqlx::Error::Io(io) if looks_like_unknown_host(&io.to_string()) => {
            format!("unknown host {:?} ({io})", opts.get_host())
        }
        sqlx::Error::Io(io) => format!("connection failed: {io}"),
        sqlx::Error::Tls(tls) => format!("TLS failed: {tls}"),
        sqlx::Error::Database(db) => match db.code().as_deref() {
            Some("28P01" | "28000") => format!(
                "authentication failed for user {:?} (check the user and password in DATABASE_URL)",
                opts.get_username()
            ),
            Some("3D000") => format!(
                "database {:?} does not exist (create it, then {MIGRATE_HINT})",
                opts.get_database().unwrap_or_default()
            ),
            _ => format!("the server refused the connection: {}", db.message()),
        },
        other => other.to_string(),
    }
}

fn looks_like_unknown_host(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    t.contains("lookup address")
        || t.contains("name or service not known")
        || t.contains("nodename nor servname")
        || t.contains("no such host")
        || t.contains("temporary failure in name resolution")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheme_is_checked_first_and_shown_without_the_rest() {
        assert_eq!(scheme("postgres://u@h/db").unwrap(), Scheme::Postgres);
        assert_eq!(scheme("postgresql://u@h/db").unwrap(), Scheme::Postgres);
        assert_eq!(scheme("sqlite://cobro.db").unwrap(), Scheme::Sqlite);
        assert_eq!(scheme("sqlite::memory:").unwrap(), Scheme::Sqlite);
        let err = scheme("postgress://root:hunter2@127.0.0.1/test")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "DATABASE_URL must start with postgres://, postgresql:// or sqlite://; got postgress://"
        );
        let bare = scheme("root:hunter2@127.0.0.1/test")
            .unwrap_err()
            .to_string();
        assert!(bare.ends_with("got a value without a scheme"), "{bare}");
        assert!(!bare.contains("hunter2"));
        // A `://` later in the value (here in the password) is no scheme.
        let later = scheme("root:hunter2://x@127.0.0.1/test")
            .unwrap_err()
            .to_string();
        assert!(later.ends_with("got a value without a scheme"), "{later}");
        assert!(!later.contains("hunter2"), "{later}");
    }

    #[test]
    fn readiness_compares_applied_versions_with_the_binary() {
        let m = sqlite_migrator();
        let all: Vec<i64> = m.iter().map(|m| m.version).collect();
        assert_eq!(Readiness::of(None, &m), Readiness::Missing);
        assert_eq!(Readiness::of(Some(&all), &m), Readiness::Ready);
        let older = &all[..all.len() - 2];
        let behind = Readiness::of(Some(older), &m);
        assert_eq!(
            behind,
            Readiness::Behind {
                pending: all[all.len() - 2..].to_vec()
            }
        );
        assert!(behind.problem().unwrap().contains("`cobro migrate`"));
        assert!(
            Readiness::Missing
                .problem()
                .unwrap()
                .contains("`cobro migrate`")
        );
        assert_eq!(newly_applied(older, &m).len(), 2);
        assert!(newly_applied(&all, &m).is_empty());
    }

    #[test]
    fn unknown_hosts_are_recognised_in_resolver_words() {
        assert!(looks_like_unknown_host(
            "failed to lookup address information: Name or service not known"
        ));
        assert!(!looks_like_unknown_host("Connection reset by peer"));
    }
}
