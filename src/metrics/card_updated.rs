//! The counter of scheduled business retries pulled forward because the
//! card network updated the card (account-updater webhooks); bumped by the
//! webhook route, which knows what the event did.

/// Counter: scheduled business retries pulled forward by a card update.
pub const CARD_UPDATED_RETRIES: &str = "cobro_card_updated_retries_total";

pub(super) fn describe() {
    ::metrics::describe_counter!(
        CARD_UPDATED_RETRIES,
        "Scheduled business retries pulled forward because the card network updated the card."
    );
}

/// `n` scheduled retries pulled forward by one card-update event.
pub fn retries_pulled_forward(n: usize) {
    ::metrics::counter!(CARD_UPDATED_RETRIES).increment(n as u64);
}
