//! The charge endpoints of the simulator: `POST /v1/charges` (body parsing, a decline drawn
//! with `p_decline`, a webhook per execution) and `GET /v1/charges/{key}`, both run through
//! the shared request flow.
//!
//! Invariant: a charge request executes at most once, and only after the pre-execution
//! faults passed (see `flow`); a webhook is queued only for an executed charge, never for a
//! replay, once it is recorded and before the reply is dropped or held.

use chrono::Utc;
use serde_json::Value;

use super::{
    books::{Books, Decline, Recalled},
    faults::{Dice, Faults},
    flow::{Kind, Payment},
    ledger::{ChargeBody, ChargeResult},
    parse::{Invalid, amount_minor, currency, invalid, non_empty, object},
    server::AppState,
};

impl Payment for ChargeBody {
    type Result = ChargeResult;
    /// The decline, when the charge is to be declined.
    type Drawn = Option<Decline>;
    const KIND: Kind = Kind::Charge;

    fn order_id(&self) -> &str {
        &self.order_id
    }

    fn recall(
        &self,
        books: &mut Books,
        idempotent: bool,
        key: &str,
    ) -> Option<Recalled<ChargeResult>> {
        books.recall_charge(idempotent, key, self)
    }

    fn draw(dice: &mut Dice, faults: &Faults) -> Option<Decline> {
        dice.fire(faults.p_decline).then(|| Decline {
            code: dice.decline_code(&faults.decline_codes),
            network_advice_code: faults.decline_network_advice.clone(),
        })
    }

    fn record(&self, books: &mut Books, key: &str, decline: Option<Decline>) -> ChargeResult {
        books.record_charge(key, self, decline, Utc::now())
    }

    fn recorded(app: &AppState, result: &ChargeResult) {
        app.emit_webhook(result);
    }

    fn parse(body: &[u8]) -> Result<Self, Invalid> {
        parse_charge(body)
    }

    fn find(books: &Books, key: &str) -> Option<ChargeResult> {
        Books::lookup(books, key)
    }
}

fn parse_charge(body: &[u8]) -> Result<ChargeBody, Invalid> {
    let map = object(body)?;
    let order_id = non_empty(&map, "order_id")?;
    let amount_minor = amount_minor(&map)?;
    let currency = currency(&map)?;
    let payment_method = match map.get("payment_method") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            return Err(invalid("payment_method", "payment_method must be a string"));
        }
    };
    Ok(ChargeBody {
        order_id,
        amount_minor,
        currency,
        payment_method,
    })
}
