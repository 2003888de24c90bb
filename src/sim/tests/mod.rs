//! End-to-end tests of the gateway simulator over real HTTP on 127.0.0.1:0, and the helpers
//! they share (start a simulator, a reqwest client, charge/refund/lookup/ledger calls).
//!
//! Invariant: these tests only talk to the simulator through HTTP (reqwest or a raw TCP
//! socket), exactly like the worker does; nothing reaches into its state in-process.

mod charges;
mod complete;
mod faults;
mod listing;
mod proxy;
mod refunds;
mod refuse;
mod throttle;

use std::time::Duration;

use reqwest::Client;
use tokio::net::TcpListener;
use uuid::Uuid;

use super::*;

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

async fn start(cfg: SimConfig) -> TestResult<SimHandle> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    Ok(spawn(listener, cfg).await?)
}

async fn start_with(faults: Faults) -> TestResult<SimHandle> {
    start(SimConfig {
        faults,
        ..SimConfig::default()
    })
    .await
}

fn client(timeout: Duration) -> TestResult<Client> {
    Ok(Client::builder().timeout(timeout).build()?)
}

fn body(order_id: &str, amount_minor: i64) -> ChargeBody {
    ChargeBody {
        order_id: order_id.to_owned(),
        amount_minor,
        currency: "EUR".to_owned(),
        payment_method: Some("pm_card_visa".to_owned()),
    }
}

async fn charge(
    c: &Client,
    sim: &SimHandle,
    key: &str,
    b: &ChargeBody,
) -> reqwest::Result<reqwest::Response> {
    c.post(format!("{}/v1/charges", sim.url()))
        .header(IDEMPOTENCY_KEY_HEADER, key)
        .json(b)
        .send()
        .await
}

async fn lookup(c: &Client, sim: &SimHandle, key: &str) -> reqwest::Result<reqwest::Response> {
    c.get(format!("{}/v1/charges/{key}", sim.url()))
        .send()
        .await
}

fn refund_body(charge_id: &str, order_id: &str, amount_minor: i64) -> RefundBody {
    RefundBody {
        charge_id: charge_id.to_owned(),
        order_id: order_id.to_owned(),
        amount_minor,
        currency: "EUR".to_owned(),
    }
}

async fn refund(
    c: &Client,
    sim: &SimHandle,
    key: &str,
    b: &RefundBody,
) -> reqwest::Result<reqwest::Response> {
    c.post(format!("{}/v1/refunds", sim.url()))
        .header(IDEMPOTENCY_KEY_HEADER, key)
        .json(b)
        .send()
        .await
}

async fn lookup_refund(
    c: &Client,
    sim: &SimHandle,
    key: &str,
) -> reqwest::Result<reqwest::Response> {
    c.get(format!("{}/v1/refunds/{key}", sim.url()))
        .send()
        .await
}

async fn ledger(c: &Client, sim: &SimHandle) -> TestResult<Ledger> {
    let resp = c.get(format!("{}/ledger", sim.url())).send().await?;
    Ok(resp.error_for_status()?.json().await?)
}

async fn put_faults(c: &Client, sim: &SimHandle, f: &Faults) -> TestResult<reqwest::Response> {
    Ok(c.put(format!("{}/control/faults", sim.url()))
        .json(f)
        .send()
        .await?)
}

fn key() -> String {
    Uuid::new_v4().to_string()
}

/// Polls `GET /ledger` until `done` holds, for at most `within` (a generous bound: only a
/// stalled simulator reaches it).
async fn ledger_when(
    c: &Client,
    sim: &SimHandle,
    within: Duration,
    done: impl Fn(&Ledger) -> bool,
) -> TestResult<Ledger> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let l = ledger(c, sim).await?;
        if done(&l) {
            return Ok(l);
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("ledger never reached the expected state: {l:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The client must see the connection close before any response: a request error, not a
/// status and not a timeout.
fn assert_dropped(result: reqwest::Result<reqwest::Response>) {
    match result {
        Ok(resp) => panic!("expected a dropped connection, got HTTP {}", resp.status()),
        Err(e) => {
            assert!(
                !e.is_timeout(),
                "expected a closed connection, got a timeout: {e:?}"
            );
            assert!(e.status().is_none(), "unexpected status: {e:?}");
            assert!(e.is_request(), "expected a request error: {e:?}");
            let chain = format!("{e:?}");
            assert!(chain.contains("IncompleteMessage"), "{chain}");
        }
    }
}
