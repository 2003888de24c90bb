//! The incident switch, as a worker sees it: while sending is paused
//! (`cobro pause`, `POST /control/pause`), no new charge is sent, no
//! business retry is created and no lookup's "not found" is re-sent; those
//! attempts wait, parked, with their state and checks kept. Lookups,
//! refunds and the review janitor go on. On resume, the breaker's paced
//! re-wake brings the parked attempts back.
//!
//! Invariant: the switch lives in the database (one row, every change in
//! an append-only history); each worker reads it every `COBRO_BREAKER_POLL`
//! (1 s), so a pause takes effect everywhere within that. A worker that
//! cannot read it keeps its last view.

use std::sync::atomic::{AtomicBool, Ordering};
use tracing::{info, warn};

use crate::store::{Store, StoreError};

pub struct Pause {
    store: Store,
    paused: AtomicBool,
}

impl Pause {
    /// Read on every breaker pass ([`crate::breaker::Breaker::run`]).
    pub fn new(store: Store) -> Self {
        Self {
            store,
            paused: AtomicBool::new(false),
        }
    }

    /// As of this process's last look.
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    /// Reads the switch now.
    pub async fn refresh(&self) -> Result<bool, StoreError> {
        let now = self.store.sending_paused().await?;
        let was = self.paused.swap(now, Ordering::Relaxed);
        match (was, now) {
            (false, true) => {
                warn!("sending paused by the incident switch: new charges wait, lookups continue")
            }
            (true, false) => info!("sending resumed"),
            _ => {}
        }
        Ok(now)
    }
}
