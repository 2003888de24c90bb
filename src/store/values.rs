//! How each backend stores an id and a time, for the steps written once
//! over sqlx's `Database` (generic over the backend, each backend passing
//! its SQL): PostgreSQL stores uuid and timestamptz as they are; SQLite
//! stores hyphenated text and milliseconds since the epoch.

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// A backend's way of binding an id (`Id`) and a time (`At`).
pub(crate) struct Values<Id, At> {
    pub id: fn(Uuid) -> Id,
    pub at: fn(DateTime<Utc>) -> At,
}

/// PostgreSQL: uuid and timestamptz.
pub(crate) const PG: Values<Uuid, DateTime<Utc>> = Values {
    id: |id| id,
    at: |t| t,
};

/// SQLite: hyphenated text and milliseconds since the epoch.
pub(crate) const LITE: Values<String, i64> = Values {
    id: |id| id.hyphenated().to_string(),
    at: |t| t.timestamp_millis(),
};
