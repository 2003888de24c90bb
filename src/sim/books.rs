//! The simulator's mutable books: two journals (charges, refunds), each with its
//! idempotency-key index, and the counters, behind `Books`.
//!
//! Invariant: between resets each journal is append-only with a 1-based gapless `seq`, every
//! entry is exactly one executed request, `first_by_key` points at the first entry carrying a
//! key, and in idempotent mode a key never gets a second entry (a key whose first request is
//! still executing, record-on-complete, is `in_flight` and gets no other); the approved
//! refunds of a charge never add up to more than the charge's amount, in either mode.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};

use super::ledger::{
    AMOUNT_EXCEEDS_CHARGE, APPROVED, CHARGE_NOT_APPROVED, CHARGE_NOT_FOUND, CURRENCY_MISMATCH,
    ChargeBody, ChargeResult, DECLINED, Ledger, LedgerEntry, RefundBody, RefundEntry, RefundResult,
    Stats,
};

/// What executing a charge or refund request did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Execution<R> {
    /// A new entry was appended.
    Executed(R),
    /// Idempotent mode: the key was seen with the same parameters; nothing changed.
    Replayed(R),
    /// Idempotent mode: the key was seen with different parameters; nothing changed.
    KeyReused,
    /// Idempotent mode: the key's first request is still executing (record-on-complete);
    /// nothing changed.
    InFlight,
}

/// What a request with a key already known gets instead of executing (idempotent mode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Recalled<R> {
    /// Seen with the same parameters: its stored result.
    Replayed(R),
    /// Seen with other parameters.
    KeyReused,
    /// Its first request is still executing (record-on-complete).
    InFlight,
}

impl<R> From<Recalled<R>> for Execution<R> {
    fn from(recalled: Recalled<R>) -> Self {
        match recalled {
            Recalled::Replayed(result) => Execution::Replayed(result),
            Recalled::KeyReused => Execution::KeyReused,
            Recalled::InFlight => Execution::InFlight,
        }
    }
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

impl Recorded for RefundEntry {
    type Body = RefundBody;
    type Answer = RefundResult;
    fn same_params(&self, body: &RefundBody) -> bool {
        RefundEntry::same_params(self, body)
    }
    fn answer(&self) -> RefundResult {
        self.to_result()
    }
}

/// The executed requests of one kind, in order, with their key index.
#[derive(Debug)]
struct Journal<E> {
    entries: Vec<E>,
    /// Index in `entries` of the first entry carrying each key.
    first_by_key: HashMap<String, usize>,
    /// Idempotent mode: keys whose request is executing and not yet recorded
    /// (record-on-complete). A reset leaves them: their execution still ends in the books.
    in_flight: HashSet<String>,
}

impl<E> Default for Journal<E> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            first_by_key: HashMap::new(),
            in_flight: HashSet::new(),
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
    /// key seen before, or `InFlight` for a key still executing. `None` when the request
    /// must execute.
    fn recall(&self, idempotent: bool, key: &str, body: &E::Body) -> Option<Recalled<E::Answer>> {
        if !idempotent {
            return None;
        }
        let Some(entry) = self.first(key) else {
            return self.in_flight.contains(key).then_some(Recalled::InFlight);
        };
        Some(if entry.same_params(body) {
            Recalled::Replayed(entry.answer())
        } else {
            Recalled::KeyReused
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

/// Which journal a key belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Charge,
    Refund,
}

/// A charge's decline as the simulator draws it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decline {
    pub code: String,
    pub network_advice_code: Option<String>,
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
    refunds: Journal<RefundEntry>,
    stats: Stats,
    /// Charge ids handed out since start-up; never reset so ids stay unique per process.
    charges_issued: u64,
    /// Refund ids handed out since start-up; never reset either.
    refunds_issued: u64,
}

impl Books {
    pub(crate) fn stats_mut(&mut self) -> &mut Stats {
        &mut self.stats
    }

    /// Marks `key` as executing (idempotent mode, record-on-complete): until
    /// [`Books::settle`], requests with it are told [`Execution::InFlight`].
    pub(crate) fn begin(&mut self, kind: Kind, key: &str) {
        let keys = match kind {
            Kind::Charge => &mut self.charges.in_flight,
            Kind::Refund => &mut self.refunds.in_flight,
        };
        keys.insert(key.to_owned());
    }

    /// Ends what [`Books::begin`] started (the entry is being recorded).
    pub(crate) fn settle(&mut self, kind: Kind, key: &str) {
        let keys = match kind {
            Kind::Charge => &mut self.charges.in_flight,
            Kind::Refund => &mut self.refunds.in_flight,
        };
        keys.remove(key);
    }

    /// Idempotent mode: what a charge request with a known key gets instead of executing
    /// (counting replays). `None` when it must execute.
    pub(crate) fn recall_charge(
        &mut self,
        idempotent: bool,
        key: &str,
        body: &ChargeBody,
    ) -> Option<Recalled<ChargeResult>> {
        let known = self.charges.recall(idempotent, key, body)?;
        if matches!(known, Recalled::Replayed(_)) {
            self.stats.replays += 1;
        }
        Some(known)
    }

    /// Appends an executed charge (declined when `decline` is given, with
    /// its code and the network's advice), executed at `at`.
    pub(crate) fn record_charge(
        &mut self,
        key: &str,
        body: &ChargeBody,
        decline: Option<Decline>,
        at: DateTime<Utc>,
    ) -> ChargeResult {
        let (decline_code, network_advice_code) = match decline {
            Some(d) => (Some(d.code), d.network_advice_code),
            None => (None, None),
        };
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
            network_advice_code,
            at,
            payment_method: body.payment_method.clone(),
        };
        self.stats.executed += 1;
        self.charges.append(key, entry)
    }

    /// Executes (or replays) a charge. `decline` is called only when a new entry is
    /// appended and returns `Some(code)` to record a decline.
    #[cfg(test)]
    pub(crate) fn execute(
        &mut self,
        idempotent: bool,
        key: &str,
        body: &ChargeBody,
        decline: impl FnOnce() -> Option<String>,
    ) -> Execution<ChargeResult> {
        self.execute_at(idempotent, key, body, decline, Utc::now())
    }

    /// [`Books::execute`], recording the execution time `at`.
    pub(crate) fn execute_at(
        &mut self,
        idempotent: bool,
        key: &str,
        body: &ChargeBody,
        decline: impl FnOnce() -> Option<String>,
        at: DateTime<Utc>,
    ) -> Execution<ChargeResult> {
        if let Some(known) = self.recall_charge(idempotent, key, body) {
            return known.into();
        }
        let decline = decline().map(|code| Decline {
            code,
            network_advice_code: None,
        });
        Execution::Executed(self.record_charge(key, body, decline, at))
    }

    /// Executes (or replays) a refund: approved unless [`Books::refund_decline`] objects.
    /// Declined refunds are recorded too; they never count against the charge.
    #[cfg(test)]
    pub(crate) fn refund(
        &mut self,
        idempotent: bool,
        key: &str,
        body: &RefundBody,
    ) -> Execution<RefundResult> {
        self.refund_at(idempotent, key, body, Utc::now())
    }

    /// [`Books::refund`], recording the execution time `at`.
    pub(crate) fn refund_at(
        &mut self,
        idempotent: bool,
        key: &str,
        body: &RefundBody,
        at: DateTime<Utc>,
    ) -> Execution<RefundResult> {
        if let Some(known) = self.recall_refund(idempotent, key, body) {
            return known.into();
        }
        Execution::Executed(self.record_refund(key, body, at))
    }

    /// Idempotent mode: what a refund request with a known key gets instead of executing
    /// (counting replays). `None` when it must execute.
    pub(crate) fn recall_refund(
        &mut self,
        idempotent: bool,
        key: &str,
        body: &RefundBody,
    ) -> Option<Recalled<RefundResult>> {
        let known = self.refunds.recall(idempotent, key, body)?;
        if matches!(known, Recalled::Replayed(_)) {
            self.stats.refund_replays += 1;
        }
        Some(known)
    }

    /// Appends an executed refund, approved unless [`Books::refund_decline`] objects now.
    pub(crate) fn record_refund(
        &mut self,
        key: &str,
        body: &RefundBody,
        at: DateTime<Utc>,
    ) -> RefundResult {
        let decline_code = self.refund_decline(body);
        self.refunds_issued += 1;
        let entry = RefundEntry {
            seq: self.refunds.next_seq(),
            idempotency_key: key.to_owned(),
            refund_id: format!("re_{:06}", self.refunds_issued),
            charge_id: body.charge_id.clone(),
            order_id: body.order_id.clone(),
            amount_minor: body.amount_minor,
            currency: body.currency.clone(),
            status: status(decline_code),
            decline_code: decline_code.map(str::to_owned),
            at,
        };
        self.refunds.append(key, entry)
    }

    /// Why `body` must be declined, or `None` to approve it: the charge must exist, be
    /// approved and be in the same currency, and its approved refunds plus this one must not
    /// exceed its amount.
    fn refund_decline(&self, body: &RefundBody) -> Option<&'static str> {
        let Some(charge) = self
            .charges
            .entries
            .iter()
            .find(|c| c.charge_id == body.charge_id)
        else {
            return Some(CHARGE_NOT_FOUND);
        };
        if !charge.is_approved() {
            return Some(CHARGE_NOT_APPROVED);
        }
        if charge.currency != body.currency {
            return Some(CURRENCY_MISMATCH);
        }
        let refunded: i64 = self
            .refunds
            .entries
            .iter()
            .filter(|r| r.charge_id == charge.charge_id && r.is_approved())
            .map(|r| r.amount_minor)
            .sum();
        (refunded.saturating_add(body.amount_minor) > charge.amount_minor)
            .then_some(AMOUNT_EXCEEDS_CHARGE)
    }

    /// The result of the first charge recorded under `key`.
    pub(crate) fn lookup(&self, key: &str) -> Option<ChargeResult> {
        self.charges.lookup(key)
    }

    /// The result of the first refund recorded under `key`.
    pub(crate) fn lookup_refund(&self, key: &str) -> Option<RefundResult> {
        self.refunds.lookup(key)
    }

    /// Executed charges, in `seq` order.
    pub(crate) fn charges(&self) -> &[LedgerEntry] {
        &self.charges.entries
    }

    /// Executed refunds, in `seq` order.
    pub(crate) fn refunds(&self) -> &[RefundEntry] {
        &self.refunds.entries
    }

    pub(crate) fn snapshot(&self) -> Ledger {
        Ledger {
            entries: self.charges.entries.clone(),
            refunds: self.refunds.entries.clone(),
            stats: self.stats,
        }
    }

    /// Clears both journals, their key indexes and the counters (ids keep counting).
    pub(crate) fn reset(&mut self) {
        self.charges.clear();
        self.refunds.clear();
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
    fn in_flight_key_is_neither_replayed_nor_executed_until_settled() {
        let mut books = Books::default();
        books.begin(Kind::Charge, "k");
        assert_eq!(
            books.recall_charge(true, "k", &body(100)),
            Some(Recalled::InFlight)
        );
        // Without idempotency, and for refunds (another journal), the key means nothing.
        assert_eq!(books.recall_charge(false, "k", &body(100)), None);
        assert_eq!(books.recall_refund(true, "k", &refund_body("ch", 1)), None);
        assert_eq!(books.lookup("k"), None);
        // A reset does not forget it: its execution still ends in the books.
        books.reset();
        assert_eq!(
            books.recall_charge(true, "k", &body(100)),
            Some(Recalled::InFlight)
        );
        books.settle(Kind::Charge, "k");
        let recorded = books.record_charge("k", &body(100), None, Utc::now());
        let replayed = books.recall_charge(true, "k", &body(100));
        assert_eq!(replayed, Some(Recalled::Replayed(recorded)));
        assert_eq!(books.snapshot().stats.executed, 1);
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

    /// Books holding one approved charge of `amount` EUR, and its id.
    fn charged(amount: i64) -> (Books, String) {
        let mut books = Books::default();
        let charge_id = match books.execute(true, "c", &body(amount), || None) {
            Execution::Executed(r) => r.charge_id,
            other => panic!("charge not executed: {other:?}"),
        };
        (books, charge_id)
    }

    fn refund_body(charge_id: &str, amount: i64) -> RefundBody {
        RefundBody {
            charge_id: charge_id.to_owned(),
            order_id: "o1".to_owned(),
            amount_minor: amount,
            currency: "EUR".to_owned(),
        }
    }

    /// The decline code of a newly executed refund (`None` when approved).
    fn refund_code(
        books: &mut Books,
        idempotent: bool,
        key: &str,
        b: &RefundBody,
    ) -> Option<String> {
        match books.refund(idempotent, key, b) {
            Execution::Executed(r) => r.decline_code,
            other => panic!("refund not executed: {other:?}"),
        }
    }

    #[test]
    fn partial_refunds_up_to_the_charge_then_one_cent_more_is_declined() {
        let (mut books, ch) = charged(1000);
        assert_eq!(
            refund_code(&mut books, true, "r1", &refund_body(&ch, 600)),
            None
        );
        assert_eq!(
            refund_code(&mut books, true, "r2", &refund_body(&ch, 400)),
            None
        );
        assert_eq!(
            refund_code(&mut books, true, "r3", &refund_body(&ch, 1)).as_deref(),
            Some(AMOUNT_EXCEEDS_CHARGE)
        );
        let ledger = books.snapshot();
        assert_eq!(
            ledger.refunds.iter().map(|r| r.seq).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        let refunded: i64 = ledger
            .refunds_for_charge(&ch)
            .filter(|r| r.is_approved())
            .map(|r| r.amount_minor)
            .sum();
        assert_eq!(refunded, 1000);
    }

    #[test]
    fn declined_refunds_are_recorded_but_do_not_count() {
        let (mut books, ch) = charged(1000);
        assert_eq!(
            refund_code(&mut books, true, "r1", &refund_body(&ch, 1001)).as_deref(),
            Some(AMOUNT_EXCEEDS_CHARGE)
        );
        assert_eq!(
            refund_code(&mut books, true, "r2", &refund_body(&ch, 1000)),
            None
        );
        let found = books.lookup_refund("r1").map(|r| r.status);
        assert_eq!(found.as_deref(), Some(DECLINED));
        assert_eq!(books.snapshot().refunds.len(), 2);
    }

    #[test]
    fn refund_decline_codes() {
        let (mut books, ch) = charged(1000);
        books.execute(true, "c2", &body(500), || Some("card_declined".to_owned()));
        let declined_charge = books.lookup("c2").map(|r| r.charge_id).unwrap_or_default();
        let usd = RefundBody {
            currency: "USD".to_owned(),
            ..refund_body(&ch, 100)
        };
        let cases = [
            ("r1", refund_body("ch_unknown", 100), CHARGE_NOT_FOUND),
            (
                "r2",
                refund_body(&declined_charge, 100),
                CHARGE_NOT_APPROVED,
            ),
            ("r3", usd, CURRENCY_MISMATCH),
        ];
        for (key, b, code) in cases {
            assert_eq!(
                refund_code(&mut books, true, key, &b).as_deref(),
                Some(code)
            );
        }
        assert_eq!(
            refund_code(&mut books, true, "r4", &refund_body(&ch, 1000)),
            None
        );
    }

    #[test]
    fn idempotent_refund_replays_and_conflicts() {
        let (mut books, ch) = charged(1000);
        let first = books.refund(true, "r", &refund_body(&ch, 300));
        assert!(matches!(first, Execution::Executed(ref r) if r.is_approved()));
        let again = books.refund(true, "r", &refund_body(&ch, 300));
        assert!(matches!(again, Execution::Replayed(ref r) if r.is_approved()));
        assert_eq!(
            books.refund(true, "r", &refund_body(&ch, 301)),
            Execution::KeyReused
        );
        // Charge and refund keys live apart: the charge's key is a new refund key.
        assert_eq!(
            refund_code(&mut books, true, "c", &refund_body(&ch, 1)),
            None
        );
        let ledger = books.snapshot();
        assert_eq!(ledger.refunds.len(), 2);
        assert_eq!((ledger.stats.refund_replays, ledger.stats.replays), (1, 0));
    }

    #[test]
    fn non_idempotent_refunds_execute_every_time_and_reset_clears_them() {
        let (mut books, ch) = charged(1000);
        assert_eq!(
            refund_code(&mut books, false, "r", &refund_body(&ch, 400)),
            None
        );
        assert_eq!(
            refund_code(&mut books, false, "r", &refund_body(&ch, 400)),
            None
        );
        assert_eq!(
            refund_code(&mut books, false, "r", &refund_body(&ch, 400)).as_deref(),
            Some(AMOUNT_EXCEEDS_CHARGE)
        );
        let first = books.lookup_refund("r").map(|r| r.refund_id);
        assert_eq!(first.as_deref(), Some("re_000001"));
        books.reset();
        assert_eq!(books.snapshot(), Ledger::default());
        assert_eq!(books.lookup_refund("r"), None);
        let after = books.refund(false, "r", &refund_body(&ch, 1));
        assert!(matches!(
            after,
            Execution::Executed(ref r)
                if r.refund_id == "re_000004" && r.decline_code.as_deref() == Some(CHARGE_NOT_FOUND)
        ));
    }
}
