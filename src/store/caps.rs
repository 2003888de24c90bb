//! The card networks' caps on business retries of one card, and finance's
//! explicit override of them.
//!
//! Invariant: one rule at every door. PostgreSQL keeps it in
//! `cobro.check_card_caps` (called by `cobro.business_retry` and, before a
//! person's request is accepted, by `cobro.check_retry_caps`); SQLite runs
//! the same steps from Rust ([`super::lite::caps`]). Each network's caps
//! apply to its own cards, by the brand the gateway last reported for the
//! card (the transition log's `card_brand` evidence); an unknown brand gets
//! every cap. The caps are skipped
//! only when finance's newest request to retry the declined attempt
//! recorded an [`OverrideReason`] in the append-only log; the new attempt's
//! log row then carries that reason. The types are the domain's
//! ([`crate::domain::card_caps`]).

use uuid::Uuid;

use super::{Db, RetryError, Store};
pub use crate::domain::card_caps::{
    BadOverrideReason, CardCaps, MAX_OVERRIDE_REASON, OverrideReason,
};

impl Store {
    /// Refused (`RetryError::CardCap`, naming the cap and how to override
    /// it) when the retry of the declined attempt `attempt_id` would pass
    /// one of `caps`; the database's own rule, asked before a person's
    /// request is accepted.
    pub async fn check_retry_caps(
        &self,
        attempt_id: Uuid,
        caps: CardCaps,
    ) -> Result<(), RetryError> {
        let [visa, mc_day, mc_month] = caps.sql();
        match &self.db {
            Db::Pg(p) => {
                let done = sqlx::query("SELECT cobro.check_retry_caps($1, $2, $3, $4)")
                    .bind(attempt_id)
                    .bind(visa)
                    .bind(mc_day)
                    .bind(mc_month)
                    .execute(p)
                    .await;
                let Err(e) = done else { return Ok(()) };
                let Some(db) = e.as_database_error() else {
                    return Err(RetryError::Db(e));
                };
                let msg = db.message().to_owned();
                Err(match db.code().as_deref() {
                    Some("CB007") => RetryError::CardCap(msg),
                    Some("CB404") => RetryError::NotFound(msg),
                    _ => RetryError::Db(e),
                })
            }
            Db::Lite(p) => super::lite::caps::check_retry(p, attempt_id, caps).await,
        }
    }
}
