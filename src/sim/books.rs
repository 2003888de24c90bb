//! The simulator's mutable books: the ledger entries with their idempotency-key index and
//! the counters, behind `Books`.
//!
//! Invariant: between resets the ledger is append-only, `seq` is 1-based and gapless, every
//! entry is exactly one executed charge, `first_by_key` points at the first entry carrying a
//! key, and in idempotent mode a key never gets a second entry.

use std::collections::HashMap;

use chrono::Utc;

use super::ledger::{APPROVED, ChargeBody, ChargeResult, DECLINED, Ledger, LedgerEntry, Stats};

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
