//! The simulator's books: the public wire types (what clients and tests decode) and the
//! in-memory ledger with its idempotency-key index and counters.
//!
//! Invariant: between resets the ledger is append-only, `seq` is 1-based and gapless, every
//! entry is exactly one executed charge, `first_by_key` points at the first entry carrying a
//! key, and in idempotent mode a key never gets a second entry.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Status of an approved charge.
pub const APPROVED: &str = "approved";
/// Status of a declined charge.
pub const DECLINED: &str = "declined";

/// Body of `POST /v1/charges`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ChargeBody {
    pub order_id: String,
    pub amount_minor: i64,
    pub currency: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment_method: Option<String>,
}

/// Answer to a charge (200 approved, 402 declined) or to a lookup (200).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ChargeResult {
    pub charge_id: String,
    /// `"approved"` or `"declined"`.
    pub status: String,
    #[serde(default)]
    pub decline_code: Option<String>,
    pub idempotency_key: String,
    pub order_id: String,
    pub amount_minor: i64,
    pub currency: String,
}

impl ChargeResult {
    /// Whether this charge was approved.
    pub fn is_approved(&self) -> bool {
        self.status == APPROVED
    }
}

/// One executed charge.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LedgerEntry {
    pub seq: u64,
    pub idempotency_key: String,
    pub order_id: String,
    pub amount_minor: i64,
    pub currency: String,
    pub charge_id: String,
    /// `"approved"` or `"declined"`.
    pub status: String,
    #[serde(default)]
    pub decline_code: Option<String>,
    pub at: DateTime<Utc>,
}

impl LedgerEntry {
    /// The answer a client gets for this entry.
    pub fn to_result(&self) -> ChargeResult {
        ChargeResult {
            charge_id: self.charge_id.clone(),
            status: self.status.clone(),
            decline_code: self.decline_code.clone(),
            idempotency_key: self.idempotency_key.clone(),
            order_id: self.order_id.clone(),
            amount_minor: self.amount_minor,
            currency: self.currency.clone(),
        }
    }

    fn same_params(&self, body: &ChargeBody) -> bool {
        self.order_id == body.order_id
            && self.amount_minor == body.amount_minor
            && self.currency == body.currency
    }
}

/// Request and outcome counters since start-up or the last reset.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct Stats {
    /// Every `POST /v1/charges` received (including rejected ones).
    pub charge_requests: u64,
    /// Every `GET /v1/charges/{key}` received.
    pub lookup_requests: u64,
    /// Charges executed (= ledger entries appended).
    pub executed: u64,
    /// Stored results returned for a repeated idempotency key.
    pub replays: u64,
    /// Connections dropped on purpose (request lost or response lost).
    pub dropped: u64,
    /// Webhook deliveries answered 2xx.
    pub webhooks_delivered: u64,
    /// Webhook deliveries given up (refused with a 4xx, or five failed tries).
    pub webhooks_failed: u64,
}

/// Body of `GET /ledger`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct Ledger {
    pub entries: Vec<LedgerEntry>,
    pub stats: Stats,
}

impl Ledger {
    /// Entries carrying the given idempotency key, in order.
    pub fn entries_for_key<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a LedgerEntry> {
        self.entries
            .iter()
            .filter(move |e| e.idempotency_key == key)
    }

    /// Entries for the given order, in order.
    pub fn entries_for_order<'a>(
        &'a self,
        order_id: &'a str,
    ) -> impl Iterator<Item = &'a LedgerEntry> {
        self.entries.iter().filter(move |e| e.order_id == order_id)
    }
}

/// What executing a charge request did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Execution {
    /// A new ledger entry was appended.
    Executed(ChargeResult),
    /// Idempotent mode: the key was seen with the same parameters; nothing changed.
    Replayed(ChargeResult),
    /// Idempotent mode: the key was seen with different parameters; nothing changed.
    KeyReused,
}

/// The mutable books behind the simulator.
#[derive(Debug, Default)]
pub(crate) struct Books {
    entries: Vec<LedgerEntry>,
    first_by_key: HashMap<String, usize>,
    stats: Stats,
    /// Charge ids handed out since start-up; never reset so ids stay unique per process.
    charges_issued: u64,
}

impl Books {
    pub(crate) fn stats_mut(&mut self) -> &mut Stats {
        &mut self.stats
    }

    /// Executes (or replays) a charge. `decline` is called only when a new entry is
    /// appended and returns `Some(code)` to record a decline.
    pub(crate) fn execute(
        &mut self,
        idempotent: bool,
        key: &str,
        body: &ChargeBody,
        decline: impl FnOnce() -> Option<String>,
    ) -> Execution {
        if idempotent
            && let Some(entry) = self
                .first_by_key
                .get(key)
                .and_then(|&i| self.entries.get(i))
        {
            if !entry.same_params(body) {
                return Execution::KeyReused;
            }
            self.stats.replays += 1;
            return Execution::Replayed(entry.to_result());
        }
        let decline_code = decline();
        self.charges_issued += 1;
        let entry = LedgerEntry {
            seq: self.entries.len() as u64 + 1,
            idempotency_key: key.to_owned(),
            order_id: body.order_id.clone(),
            amount_minor: body.amount_minor,
            currency: body.currency.clone(),
            charge_id: format!("ch_{:06}", self.charges_issued),
            status: if decline_code.is_some() {
                DECLINED
            } else {
                APPROVED
            }
            .to_owned(),
            decline_code,
            at: Utc::now(),
        };
        let result = entry.to_result();
        self.first_by_key
            .entry(key.to_owned())
            .or_insert(self.entries.len());
        self.entries.push(entry);
        self.stats.executed += 1;
        Execution::Executed(result)
    }

    /// The result of the first entry recorded under `key`.
    pub(crate) fn lookup(&self, key: &str) -> Option<ChargeResult> {
        self.first_by_key
            .get(key)
            .and_then(|&i| self.entries.get(i))
            .map(LedgerEntry::to_result)
    }

    pub(crate) fn snapshot(&self) -> Ledger {
        Ledger {
            entries: self.entries.clone(),
            stats: self.stats,
        }
    }

    /// Clears the ledger, the key index and the counters (charge ids keep counting).
    pub(crate) fn reset(&mut self) {
        self.entries.clear();
        self.first_by_key.clear();
        self.stats = Stats::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(amount: i64) -> ChargeBody {
        ChargeBody {
            order_id: "o1".to_owned(),
            amount_minor: amount,
            currency: "EUR".to_owned(),
            payment_method: None,
        }
    }

    #[test]
    fn idempotent_books_replay_and_conflict() {
        let mut books = Books::default();
        let first = books.execute(true, "k", &body(100), || None);
        assert!(matches!(first, Execution::Executed(ref r) if r.is_approved()));
        let again = books.execute(true, "k", &body(100), || Some("x".to_owned()));
        assert!(matches!(again, Execution::Replayed(ref r) if r.is_approved()));
        assert_eq!(
            books.execute(true, "k", &body(200), || None),
            Execution::KeyReused
        );
        let ledger = books.snapshot();
        assert_eq!(ledger.entries.len(), 1);
        assert_eq!(ledger.stats.replays, 1);
        assert_eq!(ledger.stats.executed, 1);
    }

    #[test]
    fn non_idempotent_books_append_and_lookup_first() {
        let mut books = Books::default();
        books.execute(false, "k", &body(100), || {
            Some("insufficient_funds".to_owned())
        });
        books.execute(false, "k", &body(100), || None);
        let ledger = books.snapshot();
        assert_eq!(ledger.entries.len(), 2);
        assert_eq!(
            ledger.entries.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [1, 2]
        );
        let found = books.lookup("k").map(|r| r.status);
        assert_eq!(found.as_deref(), Some(DECLINED));
        books.reset();
        assert_eq!(books.snapshot(), Ledger::default());
        assert_eq!(books.lookup("k"), None);
        let after = books.execute(false, "k", &body(1), || None);
        assert!(matches!(after, Execution::Executed(ref r) if r.charge_id == "ch_000003"));
    }
}
