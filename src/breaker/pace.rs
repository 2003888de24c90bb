//! The rate limit toward the gateway, shared by every worker process on the
//! database (one GCRA row per gateway in the store).

use std::time::Duration;

use tracing::warn;

use super::BreakerArgs;
use crate::store::Store;

/// The rate limit toward the gateway, shared by every process on the
/// database: each call first reserves a slot (one row per gateway, GCRA)
/// and waits for it. Off when no limit is set.
#[derive(Debug)]
pub struct Pace {
    store: Store,
    gateway: String,
    limit: Option<(Duration, u32)>,
}

impl Pace {
    pub fn new(store: Store, gateway: &str, args: &BreakerArgs) -> Self {
        Self {
            store,
            gateway: gateway.to_owned(),
            limit: args.pace(),
        }
    }

    /// No limit.
    pub fn off(store: Store) -> Self {
        Self {
            store,
            gateway: String::new(),
            limit: None,
        }
    }

    /// Whether calls are limited at all (with no limit, [`Pace::slot`]
    /// never waits).
    pub fn limits(&self) -> bool {
        self.limit.is_some()
    }

    /// Waits for this process's next slot toward the gateway. A database
    /// error waits one slot instead: the limit is kept roughly, never
    /// turned off by an error.
    pub async fn slot(&self) {
        let Some((interval, burst)) = self.limit else {
            return;
        };
        let wait = match self.store.pace_slot(&self.gateway, interval, burst).await {
            Ok(wait) => wait,
            Err(e) => {
                warn!(error = %e, "could not reserve a gateway slot; waiting one slot");
                interval
            }
        };
        if !wait.is_zero() {
            crate::metrics::paced(wait);
            tokio::time::sleep(wait).await;
        }
    }
}
