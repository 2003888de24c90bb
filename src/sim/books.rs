//! The simulator's mutable books: the journal of charges with its idempotency-key index, and
//! the counters, behind `Books`.
//!
//! Invariant: between resets the journal is append-only with a 1-based gapless `seq`, every
//! entry is exactly one executed request, `first_by_key` points at the first entry carrying a
//! key, and in idempotent mode a key never gets a second entry.

use std::collections::HashMap;

use chrono::Utc;

use super::ledger::{APPROVED, ChargeBody, ChargeResult, DECLINED, Ledger, LedgerEntry, Stats};

/// What executing a request did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Execution<R> {
    /// A new entry was appended.
    Executed(R),
    /// Idempotent mode: the key was seen with the same parameters; nothing changed.
    Replayed(R),
    /// Idempotent mode: the key was seen with different parameters; nothing changed.
    KeyReused,
}

/// An executed request as a journal keeps it.
trait Recorded: Clone {
    /// The request body it was executed from.
    type Body;
    /// What a client is told about it.
    type Answer;
    fn same_params(&self, body: &Self::Body) -> bool;
    fn answer(&self) -> Self::Answer;
}

impl Recorded for LedgerEntry {
    type Body = ChargeBody;
    type Answer = ChargeResult;
    fn same_params(&self, body: &ChargeBody) -> bool {
        LedgerEntry::same_params(self, body)
    }
    fn answer(&self) -> ChargeResult {
        self.to_result()
    }
}

/// The executed requests of one kind, in order, with their key index.
#[derive(Debug)]
struct Journal<E> {
    entries: Vec<E>,
    /// Index in `entries` of the first entry carrying each key.
    first_by_key: HashMap<String, usize>,
}

impl<E> Default for Journal<E> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            first_by_key: HashMap::new(),
        }
    }
}

impl<E: Recorded> Journal<E> {
    fn first(&self, key: &str) -> Option<&E> {
        self.first_by_key
            .get(key)
            .and_then(|&i| self.entries.get(i))
    }

    /// Idempotent mode: a replay (same parameters) or a conflict (other parameters) for a
    /// key seen before. `None` when the request must execute.
    fn recall(&self, idempotent: bool, key: &str, body: &E::Body) -> Option<Execution<E::Answer>> {
        let entry = self.first(key).filter(|_| idempotent)?;
        Some(if entry.same_params(body) {
            Execution::Replayed(entry.answer())
        } else {
            Execution::KeyReused
        })
    }

    /// The `seq` the next entry gets.
    fn next_seq(&self) -> u64 {
        self.entries.len() as u64 + 1
    }

    /// Appends `entry` under `key` and returns its answer.
    fn append(&mut self, key: &str, entry: E) -> E::Answer {
        let answer = entry.answer();
        self.first_by_key
            .entry(key.to_owned())
            .or_insert(self.entries.len());
        self.entries.push(entry);
        answer
    }

    /// The answer of the first entry recorded under `key`.
    fn lookup(&self, key: &str) -> Option<E::Answer> {
        self.first(key).map(E::answer)
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.first_by_key.clear();
    }
}

/// `approved` without a decline code, `declined` with one.
fn status(decline_code: Option<&str>) -> String {
    match decline_code {
        Some(_) => DECLINED,
        None => APPROVED,
    }
    .to_owned()
}

/// The mutable books behind the simulator.
#[derive(Debug, Default)]
pub(crate) struct Books {
    charges: Journal<LedgerEntry>,
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
    ) -> Execution<ChargeResult> {
        if let Some(known) = self.charges.recall(idempotent, key, body) {
            if matches!(known, Execution::Replayed(_)) {
                self.stats.replays += 1;
            }
            return known;
        }
        let decline_code = decline();
        self.charges_issued += 1;
        let entry = LedgerEntry {
            seq: self.charges.next_seq(),
            idempotency_key: key.to_owned(),
            order_id: body.order_id.clone(),
            amount_minor: body.amount_minor,
            currency: body.currency.clone(),
            charge_id: format!("ch_{:06}", self.charges_issued),
            status: status(decline_code.as_deref()),
            decline_code,
            at: Utc::now(),
        };
        self.stats.executed += 1;
        Execution::Executed(self.charges.append(key, entry))
    }

    /// The result of the first charge recorded under `key`.
    pub(crate) fn lookup(&self, key: &str) -> Option<ChargeResult> {
        self.charges.lookup(key)
    }

    pub(crate) fn snapshot(&self) -> Ledger {
        Ledger {
            entries: self.charges.entries.clone(),
            stats: self.stats,
        }
    }

    /// Clears the journal, its key index and the counters (charge ids keep counting).
    pub(crate) fn reset(&mut self) {
        self.charges.clear();
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
