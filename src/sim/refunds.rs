//! The refund endpoints of the simulator: `POST /v1/refunds` (header `Idempotency-Key`, body
//! [`RefundBody`]) and `GET /v1/refunds/{key}`, run through the same request flow, faults
//! and draw order as charges. Whether a refund is approved is decided by the books when it
//! is recorded (`Books::record_refund`), never by dice.
//!
//! Invariant: a refund request executes at most once, and only after the pre-execution
//! faults passed (see `flow`); in idempotent mode a key executes at most one refund, and
//! approved refunds never exceed the refunded charge.

use chrono::Utc;

use super::{
    books::{Books, Recalled},
    faults::{Dice, Faults},
    flow::{Kind, Payment},
    ledger::{RefundBody, RefundResult},
    parse::{Invalid, amount_minor, currency, non_empty, object},
    server::AppState,
};

impl Payment for RefundBody {
    type Result = RefundResult;
    /// Nothing: the books decide a refund when it is recorded.
    type Drawn = ();
    const KIND: Kind = Kind::Refund;

    fn order_id(&self) -> &str {
        &self.order_id
    }

    fn recall(
        &self,
        books: &mut Books,
        idempotent: bool,
        key: &str,
    ) -> Option<Recalled<RefundResult>> {
        books.recall_refund(idempotent, key, self)
    }

    fn draw(_dice: &mut Dice, _faults: &Faults) {}

    fn record(&self, books: &mut Books, key: &str, (): ()) -> RefundResult {
        books.record_refund(key, self, Utc::now())
    }

    fn recorded(_app: &AppState, _result: &RefundResult) {}

    fn parse(body: &[u8]) -> Result<Self, Invalid> {
        parse_refund(body)
    }

    fn find(books: &Books, key: &str) -> Option<RefundResult> {
        Books::lookup_refund(books, key)
    }
}

fn parse_refund(body: &[u8]) -> Result<RefundBody, Invalid> {
    let map = object(body)?;
    Ok(RefundBody {
        charge_id: non_empty(&map, "charge_id")?,
        order_id: non_empty(&map, "order_id")?,
        amount_minor: amount_minor(&map)?,
        currency: currency(&map)?,
    })
}
