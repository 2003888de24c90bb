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

/// Why [`Books::fail_refund`] changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RefundNotFailed {
    /// No refund has that id.
    Unknown,
    /// It is declined already.
    NotApproved,
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

    /// The approved refund `refund_id` fails after it succeeded (Stripe's
    /// `succeeded` -> `failed`, when the card's bank returns the money):
    /// recorded as declined with `reason`, so lookups, listings and the
    /// ledger tell it that way and its amount is free to be refunded again.
    /// The refund as it now stands, or why nothing changed.
    pub(crate) fn fail_refund(
        &mut self,
        refund_id: &str,
        reason: &str,
    ) -> Result<RefundEntry, RefundNotFailed> {
        let Some(r) = self
            .refunds
            .entries
            .iter_mut()
            .find(|r| r.refund_id == refund_id)
        else {
            return Err(RefundNotFailed::Unknown);
        };
        if !r.is_approved() {
            return Err(RefundNotFailed::NotApproved);
        }
        r.status = status(Some(reason));
        r.decline_code = Some(reason.to_owned());
        Ok(r.clone())
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
#[path = "books_tests.rs"]
mod tests;
