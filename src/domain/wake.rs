//! A wake-up job's payload: only which attempt to look at. The attempts
//! table is the truth; a queued job carries nothing else, so a lost,
//! repeated or stale wake-up can do no harm.
//!
//! Shared by the engine (which handles wake-ups), the wake-up queue (which
//! stores them) and the store (which finds the attempt a stored job names).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The wake-up job's payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wake {
    pub attempt_id: Uuid,
}

impl Wake {
    /// The attempt a stored payload names, if it names one.
    pub fn target(payload: &[u8]) -> Option<Uuid> {
        serde_json::from_slice::<Wake>(payload)
            .ok()
            .map(|w| w.attempt_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_names_its_attempt_or_nothing() {
        let id = Uuid::new_v4();
        let wake = serde_json::to_vec(&Wake { attempt_id: id }).unwrap();
        assert_eq!(Wake::target(&wake), Some(id));
        assert_eq!(Wake::target(b"{}"), None);
        assert_eq!(Wake::target(b"not json"), None);
    }
}
