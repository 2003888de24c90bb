//! The simulator's public wire types: what clients send, what they get back and what
//! `GET /ledger` shows (tests decode these).
//!
//! Invariant: a [`Ledger`] is a snapshot of the books: `entries` are exactly the charges and
//! `refunds` exactly the refunds executed since the last reset (declined ones included), each
//! list in order with its own 1-based gapless `seq`; `Ledger` and `Stats` fill missing fields
//! with defaults, so a snapshot from any simulator version decodes.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Status of an approved charge or refund.
pub const APPROVED: &str = "approved";
/// Status of a declined charge or refund.
pub const DECLINED: &str = "declined";

/// Refund decline: no charge has the given `charge_id`.
pub const CHARGE_NOT_FOUND: &str = "charge_not_found";
/// Refund decline: the charge exists but was declined.
pub const CHARGE_NOT_APPROVED: &str = "charge_not_approved";
/// Refund decline: the refund's currency is not the charge's.
pub const CURRENCY_MISMATCH: &str = "currency_mismatch";
/// Refund decline: the charge's approved refunds plus this one exceed the charge amount.
pub const AMOUNT_EXCEEDS_CHARGE: &str = "amount_exceeds_charge";

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
    /// The card network's advice with a decline (a Mastercard merchant
    /// advice code), as Stripe gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_advice_code: Option<String>,
    /// The card's network, as the simulator reads it from the test token
    /// ([`card_brand_of`]); absent for any other token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub card_brand: Option<String>,
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
    /// The card network's advice with a decline, if the faults gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_advice_code: Option<String>,
    pub at: DateTime<Utc>,
    /// The payment-method token the charge was sent with, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment_method: Option<String>,
}

impl LedgerEntry {
    /// The answer a client gets for this entry.
    pub fn to_result(&self) -> ChargeResult {
        ChargeResult {
            charge_id: self.charge_id.clone(),
            status: self.status.clone(),
            decline_code: self.decline_code.clone(),
            network_advice_code: self.network_advice_code.clone(),
            card_brand: self.payment_method.as_deref().and_then(card_brand_of),
            idempotency_key: self.idempotency_key.clone(),
            order_id: self.order_id.clone(),
            amount_minor: self.amount_minor,
            currency: self.currency.clone(),
        }
    }

    /// Whether this charge was approved.
    pub fn is_approved(&self) -> bool {
        self.status == APPROVED
    }

    pub(crate) fn same_params(&self, body: &ChargeBody) -> bool {
        self.order_id == body.order_id
            && self.amount_minor == body.amount_minor
            && self.currency == body.currency
    }
}

/// The brand the simulator reports for a payment-method token, as
/// Stripe's test tokens name it: `pm_card_<brand>` or
/// `pm_card_<brand>_<anything>` (`pm_card_mastercard`,
/// `pm_card_visa_debit`) with a brand cobro knows
/// ([`crate::domain::card_caps::CARD_BRANDS`]); any other token has none.
pub fn card_brand_of(token: &str) -> Option<String> {
    let rest = token.strip_prefix("pm_card_")?;
    crate::domain::card_caps::CARD_BRANDS
        .into_iter()
        .find(|b| {
            rest.strip_prefix(b)
                .is_some_and(|tail| tail.is_empty() || tail.starts_with('_'))
        })
        .map(str::to_owned)
}

/// Body of `POST /v1/refunds`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RefundBody {
    /// The simulator's id of the charge being refunded (`ch_…`).
    pub charge_id: String,
    pub order_id: String,
    pub amount_minor: i64,
    pub currency: String,
}

/// Answer to a refund (200 approved, 402 declined) or to a refund lookup (200).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RefundResult {
    /// The refund's own id (`re_…`), declined refunds included.
    pub refund_id: String,
    /// `"approved"` or `"declined"`.
    pub status: String,
    /// Why a refund was declined: [`CHARGE_NOT_FOUND`], [`CHARGE_NOT_APPROVED`],
    /// [`CURRENCY_MISMATCH`] or [`AMOUNT_EXCEEDS_CHARGE`].
    #[serde(default)]
    pub decline_code: Option<String>,
    pub idempotency_key: String,
    /// The refunded charge, as requested.
    pub charge_id: String,
    pub order_id: String,
    pub amount_minor: i64,
    pub currency: String,
}

impl RefundResult {
    /// Whether this refund was approved.
    pub fn is_approved(&self) -> bool {
        self.status == APPROVED
    }
}

/// One executed refund, approved or declined.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RefundEntry {
    pub seq: u64,
    pub idempotency_key: String,
    pub refund_id: String,
    /// The refunded charge, as requested.
    pub charge_id: String,
    pub order_id: String,
    pub amount_minor: i64,
    pub currency: String,
    /// `"approved"` or `"declined"`.
    pub status: String,
    #[serde(default)]
    pub decline_code: Option<String>,
    pub at: DateTime<Utc>,
}

impl RefundEntry {
    /// The answer a client gets for this refund.
    pub fn to_result(&self) -> RefundResult {
        RefundResult {
            refund_id: self.refund_id.clone(),
            status: self.status.clone(),
            decline_code: self.decline_code.clone(),
            idempotency_key: self.idempotency_key.clone(),
            charge_id: self.charge_id.clone(),
            order_id: self.order_id.clone(),
            amount_minor: self.amount_minor,
            currency: self.currency.clone(),
        }
    }

    /// Whether this refund was approved (only those count against the charge).
    pub fn is_approved(&self) -> bool {
        self.status == APPROVED
    }

    pub(crate) fn same_params(&self, body: &RefundBody) -> bool {
        self.charge_id == body.charge_id
            && self.order_id == body.order_id
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
    /// Stored charge results returned for a repeated idempotency key.
    pub replays: u64,
    /// Connections dropped on purpose (request lost or response lost), charges and refunds.
    pub dropped: u64,
    /// Every `POST /v1/refunds` received (including rejected ones).
    pub refund_requests: u64,
    /// Every `GET /v1/refunds/{key}` received.
    pub refund_lookup_requests: u64,
    /// Stored refund results returned for a repeated idempotency key.
    pub refund_replays: u64,
    /// Webhook deliveries answered 2xx.
    pub webhooks_delivered: u64,
    /// Webhook deliveries given up (refused with a 4xx, or five failed tries).
    pub webhooks_failed: u64,
    /// Every `GET /v1/charges` or `GET /v1/refunds` listing page asked for.
    pub list_requests: u64,
    /// Entries written by `POST /control/inject` (also counted in `executed` for charges).
    pub injected: u64,
    /// Requests answered 429 by the rate limit (`Faults::rate_limit_per_s`); none executed.
    pub throttled: u64,
    /// Charges and refunds answered 503 with `Retry-After` (`Faults::p_503_retry_after`);
    /// none executed.
    pub unavailable_retry_after: u64,
    /// Refusal windows started (`POST /control/refuse` or `Faults::refuse_for_ms`).
    pub refusal_windows: u64,
    /// Charge and refund requests fully received whose connection a refusal window cut
    /// before the reply: those executed before the cut are in the ledger (their reply is
    /// lost), the others were never executed.
    pub cut_in_flight: u64,
    /// Charges and refunds whose execution waited for the end of their processing
    /// (`Faults::record_on_complete`): each was invisible to lookups until then.
    pub deferred: u64,
}

/// Answer to `GET /v1/charges` and `GET /v1/refunds` (a listing page): entries executed in
/// `[from, to)`, in `seq` order; `has_more` when the next page (`starting_after` = the last
/// id here) has more.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ListPage<T> {
    pub data: Vec<T>,
    pub has_more: bool,
}

/// What `POST /control/inject` writes into the books (a test and demo facility): a charge
/// made outside cobro, a second charge for an order, a refund nobody asked cobro for. It
/// bypasses idempotency (like the memoryless gateway) and faults; an injected refund is
/// still approved or declined by the books' rules. No webhook is sent for it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Injection {
    /// `"charge"` (default) or `"refund"`.
    #[serde(default = "Injection::default_kind")]
    pub kind: String,
    /// Default: a fresh UUID (nobody's key).
    #[serde(default)]
    pub idempotency_key: Option<String>,
    pub order_id: String,
    pub amount_minor: i64,
    pub currency: String,
    /// A charge's decline code: the charge is recorded as declined.
    #[serde(default)]
    pub decline_code: Option<String>,
    /// A refund's charge (`ch_…`).
    #[serde(default)]
    pub charge_id: Option<String>,
    /// Execution time; default now (a past time puts it in an earlier listing window).
    #[serde(default)]
    pub at: Option<DateTime<Utc>>,
}

impl Injection {
    fn default_kind() -> String {
        "charge".to_owned()
    }
}

/// Body of `GET /ledger`. Every field defaults when missing.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct Ledger {
    /// Executed charges.
    pub entries: Vec<LedgerEntry>,
    /// Executed refunds, declined ones included.
    pub refunds: Vec<RefundEntry>,
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

    /// Refunds of the given charge, in order.
    pub fn refunds_for_charge<'a>(
        &'a self,
        charge_id: &'a str,
    ) -> impl Iterator<Item = &'a RefundEntry> {
        self.refunds
            .iter()
            .filter(move |r| r.charge_id == charge_id)
    }
}
