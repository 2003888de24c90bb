//! The refund endpoints of the simulator: `POST /v1/refunds` (header `Idempotency-Key`, body
//! [`RefundBody`]) and `GET /v1/refunds/{key}`, run through the same request flow, faults
//! and draw order as charges. Whether a refund is approved is decided by the books
//! (`Books::refund`), never by dice.
//!
//! Invariant: a refund request executes at most once, and only after the pre-execution
//! faults passed (see `flow`); in idempotent mode a key executes at most one refund, and
//! approved refunds never exceed the refunded charge.

use axum::{
    body::Bytes,
    extract::{ConnectInfo, Path, State},
    http::HeaderMap,
    response::Response,
};

use super::{
    books::Books,
    conn::ConnKill,
    flow::{Admitted, Kind, admit, lookup, plan, respond},
    ledger::RefundBody,
    parse::{Invalid, amount_minor, currency, non_empty, object},
    server::AppState,
};

pub(crate) async fn create_refund(
    State(app): State<AppState>,
    ConnectInfo(conn): ConnectInfo<ConnKill>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let admitted = admit(&app, Kind::Refund, &headers, &body, parse_refund).await;
    let Admitted {
        faults,
        key,
        body: refund,
    } = match admitted {
        Ok(admitted) => admitted,
        Err(response) => return response,
    };
    let idempotent = app.idempotent();
    let planned = plan(&app, &faults, &refund.order_id, |books, _| {
        books.refund(idempotent, &key, &refund)
    });
    respond(Kind::Refund, &key, planned, &conn, &faults).await
}

pub(crate) async fn lookup_refund(
    State(app): State<AppState>,
    Path(key): Path<String>,
) -> Response {
    lookup(&app, Kind::Refund, &key, Books::lookup_refund).await
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
