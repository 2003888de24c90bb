//! The charge endpoints of the simulator: `POST /v1/charges` (body parsing, a decline drawn
//! with `p_decline`, a webhook per execution) and `GET /v1/charges/{key}`, both run through
//! the shared request flow.
//!
//! Invariant: a charge request executes at most once, and only after the pre-execution
//! faults passed (see `flow`); a webhook is queued only for an executed charge, never for a
//! replay, and before the reply is dropped or held.

use axum::{
    body::Bytes,
    extract::{ConnectInfo, Path, State},
    http::HeaderMap,
    response::Response,
};
use serde_json::Value;

use super::{
    books::Books,
    conn::ConnKill,
    flow::{Admitted, Kind, Plan, admit, lookup, plan, respond},
    ledger::ChargeBody,
    parse::{Invalid, amount_minor, currency, invalid, non_empty, object},
    server::AppState,
};

pub(crate) async fn create_charge(
    State(app): State<AppState>,
    ConnectInfo(conn): ConnectInfo<ConnKill>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let admitted = admit(&app, Kind::Charge, &headers, &body, parse_charge).await;
    let Admitted {
        faults,
        key,
        body: charge,
    } = match admitted {
        Ok(admitted) => admitted,
        Err(response) => return response,
    };
    let idempotent = app.idempotent();
    let planned = plan(&app, &faults, &charge.order_id, |books, dice| {
        books.execute(idempotent, &key, &charge, || {
            dice.fire(faults.p_decline)
                .then(|| dice.decline_code(&faults.decline_codes))
        })
    });
    if let Plan::Reply {
        result,
        replay: false,
        ..
    } = &planned
    {
        app.emit_webhook(result);
    }
    respond(Kind::Charge, &key, planned, &conn, &faults).await
}

pub(crate) async fn lookup_charge(
    State(app): State<AppState>,
    Path(key): Path<String>,
) -> Response {
    lookup(&app, Kind::Charge, &key, Books::lookup).await
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
