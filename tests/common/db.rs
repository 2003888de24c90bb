//! A database of its own per test: a fresh PostgreSQL database
//! (`cobro_t_<uuid>` on `TEST_DATABASE_URL`) or a SQLite file in a fresh
//! temp directory, migrated, copied from a template, or left unmigrated;
//! dropped when the test passes (or none, for a PostgreSQL-only test when
//! PostgreSQL is not there); and the SQL a test runs on it, written once
//! per backend.

use std::path::PathBuf;

use cobro::store::{Backend, Store};
use sqlx::Connection;
use sqlx::postgres::PgConnection;
use uuid::Uuid;

use super::admin_url;

fn with_database(url: &str, db: &str) -> String {
    let (base, _) = url
        .rsplit_once('/')
        .expect("TEST_DATABASE_URL ends in /<database>");
    format!("{base}/{db}")
}

/// A fresh temp directory for the SQLite database `name`: the URL of its
/// file, and the directory.
fn sqlite_dir(name: &str) -> (String, PathBuf) {
    let dir = std::env::temp_dir().join(name);
    std::fs::create_dir_all(&dir).expect("temp dir");
    (format!("sqlite://{}", dir.join("cobro.db").display()), dir)
}

/// A new database of its own on PostgreSQL, for a PostgreSQL-only test;
/// `None` when the test is skipped (see [`super::skip_postgres`]).
pub async fn postgres_db() -> Option<TestDb> {
    if super::skip_postgres() {
        return None;
    }
    Some(TestDb::new(Backend::Postgres).await)
}

pub struct TestDb {
    pub backend: Backend,
    pub name: String,
    pub url: String,
    pub store: Store,
    dir: Option<PathBuf>,
}

impl TestDb {
    /// A new, migrated database of its own: a PostgreSQL database, or a
    /// SQLite file in a fresh temp directory.
    pub async fn new(backend: Backend) -> TestDb {
        let db = TestDb::unmigrated(backend).await;
        db.store.migrate().await.expect("migrate test database");
        db
    }

    /// [`TestDb::new`] without the migration: what a process started by the
    /// test must set up itself.
    pub async fn unmigrated(backend: Backend) -> TestDb {
        let name = format!("cobro_t_{}", Uuid::new_v4().simple());
        let (url, dir) = match backend {
            Backend::Postgres => {
                let admin = admin_url();
                let mut conn = PgConnection::connect(&admin).await.unwrap_or_else(|e| {
                    panic!(
                        "PostgreSQL is not reachable at {admin} ({e}). Start it (see README) or set TEST_DATABASE_URL."
                    )
                });
                // A database name cannot be a bound parameter; this one is ours, [a-z0-9_] only.
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .execute(&mut conn)
                    .await
                    .expect("create test database");
                (with_database(&admin, &name), None)
            }
            Backend::Sqlite => {
                let (url, dir) = sqlite_dir(&name);
                (url, Some(dir))
            }
        };
        TestDb::connect(backend, name, url, dir).await
    }

    /// A migrated database to copy fresh ones from ([`TestDb::copy_of`]),
    /// for a test that needs many: its own pool is closed (PostgreSQL copies
    /// only a database nobody is connected to). Drop it with
    /// [`TestDb::drop_db`] when done.
    pub async fn template(backend: Backend) -> TestDb {
        let db = TestDb::new(backend).await;
        db.store.close().await;
        db
    }

    /// A new database of its own with the schema of `template`, copied
    /// (`CREATE DATABASE … TEMPLATE`, or the SQLite file) instead of
    /// migrated: what [`TestDb::new`] gives, several times faster.
    pub async fn copy_of(template: &TestDb) -> TestDb {
        let name = format!("cobro_t_{}", Uuid::new_v4().simple());
        let (url, dir) = match template.backend {
            Backend::Postgres => {
                let admin = admin_url();
                let mut conn = PgConnection::connect(&admin)
                    .await
                    .unwrap_or_else(|e| panic!("PostgreSQL is not reachable at {admin} ({e})"));
                // Both names are ours, [a-z0-9_] only.
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                    "CREATE DATABASE {name} TEMPLATE {}",
                    template.name
                )))
                .execute(&mut conn)
                .await
                .expect("copy the template database");
                (with_database(&admin, &name), None)
            }
            Backend::Sqlite => {
                let from = template
                    .dir
                    .as_ref()
                    .expect("a SQLite test database has a dir");
                let (url, dir) = sqlite_dir(&name);
                for file in ["cobro.db", "cobro.db-wal"] {
                    if from.join(file).exists() {
                        std::fs::copy(from.join(file), dir.join(file))
                            .expect("copy the template database");
                    }
                }
                (url, Some(dir))
            }
        };
        TestDb::connect(template.backend, name, url, dir).await
    }

    /// The test database `name` at `url` (its SQLite directory `dir`),
    /// connected.
    async fn connect(backend: Backend, name: String, url: String, dir: Option<PathBuf>) -> TestDb {
        let store = Store::connect(&url, 10)
            .await
            .expect("connect test database");
        TestDb {
            backend,
            name,
            url,
            store,
            dir,
        }
    }

    /// Drops the database (call at the end of a passing test).
    pub async fn drop_db(self) {
        self.store.close().await;
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
            return;
        }
        if let Ok(mut conn) = PgConnection::connect(&admin_url()).await {
            let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            )))
            .execute(&mut conn)
            .await;
        }
    }

    /// Picks the statement written for this backend.
    pub fn sql(&self, pg: &'static str, lite: &'static str) -> &'static str {
        match self.backend {
            Backend::Postgres => pg,
            Backend::Sqlite => lite,
        }
    }

    /// Runs a statement (with optional text binds) and returns rows affected.
    pub async fn exec(
        &self,
        pg: &'static str,
        lite: &'static str,
        binds: &[&str],
    ) -> Result<u64, sqlx::Error> {
        match self.backend {
            Backend::Postgres => {
                let mut q = sqlx::query(pg);
                for b in binds {
                    q = q.bind(*b);
                }
                Ok(q.execute(self.store.pg_pool().unwrap())
                    .await?
                    .rows_affected())
            }
            Backend::Sqlite => {
                let mut q = sqlx::query(lite);
                for b in binds {
                    q = q.bind(*b);
                }
                Ok(q.execute(self.store.sqlite_pool().unwrap())
                    .await?
                    .rows_affected())
            }
        }
    }

    /// Runs `statements` (each already in this backend's SQL, each bound to
    /// `binds`) in one transaction, as a door of the app's own would: the
    /// rows each affected, or the first refusal (nothing is then written).
    pub async fn in_one_tx(
        &self,
        statements: &[&str],
        binds: &[&str],
    ) -> Result<Vec<u64>, sqlx::Error> {
        macro_rules! run {
            ($tx:expr) => {{
                let mut tx = $tx;
                let mut rows = Vec::with_capacity(statements.len());
                for sql in statements {
                    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql.to_string()));
                    for b in binds {
                        q = q.bind(*b);
                    }
                    rows.push(q.execute(&mut *tx).await?.rows_affected());
                }
                tx.commit().await?;
                Ok(rows)
            }};
        }
        match self.backend {
            Backend::Postgres => run!(self.store.pg_pool().unwrap().begin().await?),
            Backend::Sqlite => run!(
                self.store
                    .sqlite_pool()
                    .unwrap()
                    .begin_with("BEGIN IMMEDIATE")
                    .await?
            ),
        }
    }

    pub async fn scalar(&self, pg: &'static str, lite: &'static str) -> i64 {
        let sql = self.sql(pg, lite);
        match self.backend {
            Backend::Postgres => {
                sqlx::query_scalar(pg)
                    .fetch_one(self.store.pg_pool().unwrap())
                    .await
            }
            Backend::Sqlite => {
                sqlx::query_scalar(lite)
                    .fetch_one(self.store.sqlite_pool().unwrap())
                    .await
            }
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    pub async fn attempts(&self) -> i64 {
        self.store
            .count_by_state()
            .await
            .unwrap()
            .iter()
            .map(|(_, n)| n)
            .sum()
    }
}
