//! The HTTP adapter against real servers on 127.0.0.1, one idea per file:
//! `refunds.rs` (refunds and refund lookups classified like charges, with
//! the evidence naming the call), `failures.rs` (every failure by what the
//! gateway could have done: a refused connection, a 429 or a 503 with
//! `Retry-After`, a bare 503, a redirect), `strangers.rs` (a gateway's
//! words and ids stored bounded and NUL-free, or not taken at all),
//! `oversized.rs` (an answer or a page too large to be a real one is never
//! read). This
//! file holds what they share: the simulator each test starts, the
//! adapter pointed at it or at any URL, and the calls they make.
//!
//! Invariant: each test starts its own simulator or server and talks to it
//! only over HTTP, through [`HttpGateway`] or plain reqwest for the control
//! and ledger endpoints.

mod failures;
mod listing;
pub(super) mod oversized;
mod refunds;
mod strangers;

use std::time::Duration;

use tokio::net::TcpListener;

use super::*;
use crate::sim::{self, Faults, Ledger, SimConfig, SimHandle};

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

async fn start_sim() -> TestResult<SimHandle> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    Ok(sim::spawn(listener, SimConfig::default()).await?)
}

/// Serves `app` on 127.0.0.1 (a gateway a test shapes by hand); its URL.
async fn serve(app: axum::Router) -> TestResult<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

fn gateway(sim: &SimHandle) -> TestResult<HttpGateway> {
    gateway_at(&sim.url())
}

async fn set_faults(sim: &SimHandle, faults: &Faults) -> TestResult {
    reqwest::Client::new()
        .put(format!("{}/control/faults", sim.url()))
        .json(faults)
        .send()
        .await?
        .error_for_status()?;
    Ok(())
}

async fn ledger(sim: &SimHandle) -> TestResult<Ledger> {
    Ok(reqwest::get(format!("{}/ledger", sim.url()))
        .await?
        .error_for_status()?
        .json()
        .await?)
}

/// Charges `amount_minor` EUR through the adapter and returns the gateway's charge id.
async fn approved_charge(gw: &HttpGateway, order: &str, amount_minor: i64) -> TestResult<String> {
    let call = charge_call(order, amount_minor)?;
    match gw.charge(&call).await {
        ChargeOutcome::Approved { charge_id, .. } => Ok(charge_id),
        other => Err(format!("charge not approved: {other:?}").into()),
    }
}

fn charge_call(order: &str, amount_minor: i64) -> TestResult<ChargeCall> {
    Ok(ChargeCall {
        key: IdempotencyKey::generate(),
        attempt_id: None,
        order_id: OrderId::parse(order)?,
        amount: Amount::parse(amount_minor)?,
        currency: Currency::parse("EUR")?,
        payment_method: None,
        customer: None,
        gateway_ref: None,
        merchant_initiated: false,
    })
}

fn refund_call(charge_id: &str, order: &str, amount_minor: i64) -> TestResult<RefundCall> {
    Ok(RefundCall {
        key: IdempotencyKey::generate(),
        charge_id: charge_id.to_owned(),
        order_id: OrderId::parse(order)?,
        amount: Amount::parse(amount_minor)?,
        currency: Currency::parse("EUR")?,
    })
}

fn gateway_at(url: &str) -> TestResult<HttpGateway> {
    Ok(HttpGateway::new(HttpGatewayConfig {
        base_url: url.into(),
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_millis(1500),
        ca_file: None,
    })?)
}
