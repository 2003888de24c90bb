//! HTTP tests of refusal windows: while one is open a TCP connect is refused (nothing
//! listens on the port), afterwards the simulator listens again on the same address with
//! its ledger; requests in flight when a window begins are cut, those already executed stay
//! in the ledger and the others never execute; scheduled windows come and go on their own.
//!
//! Invariant: each test starts its own simulator and checks over HTTP (or a raw TCP connect)
//! that nothing was executed while nothing was listening.

use std::{io::ErrorKind, net::SocketAddr, time::Duration};

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::net::TcpStream;

use super::*;

/// Whether a TCP connect to `addr` is refused right now (a connection that succeeds is
/// closed at once). `None`: it was reset, as a connect racing the closing of the socket
/// can be (the kernel had queued it).
async fn refused(addr: SocketAddr) -> TestResult<Option<bool>> {
    match TcpStream::connect(addr).await {
        Ok(_) => Ok(Some(false)),
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => Ok(Some(true)),
        Err(e) if e.kind() == ErrorKind::ConnectionReset => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Waits until a connect to `addr` is refused (`true`) or accepted (`false`), for at most
/// `within`.
async fn until_refused(addr: SocketAddr, want: bool, within: Duration) -> TestResult {
    let deadline = tokio::time::Instant::now() + within;
    while refused(addr).await? != Some(want) {
        if tokio::time::Instant::now() > deadline {
            return Err(format!("connects never became refused = {want}").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

async fn refuse_for(c: &Client, sim: &SimHandle, for_ms: u64) -> TestResult<reqwest::Response> {
    Ok(c.post(format!("{}/control/refuse", sim.url()))
        .json(&json!({ "for_ms": for_ms }))
        .send()
        .await?)
}

/// A request cut by an outage: an error without a status and without a timeout.
fn assert_cut(result: reqwest::Result<reqwest::Response>) {
    match result {
        Ok(resp) => panic!("expected a cut connection, got HTTP {}", resp.status()),
        Err(e) => assert!(!e.is_timeout() && e.status().is_none(), "{e:?}"),
    }
}

#[tokio::test]
async fn refusal_window_refuses_connects_then_listens_again_with_the_same_ledger() -> TestResult {
    let sim = start(SimConfig::default()).await?;
    let c = client(Duration::from_secs(5))?;
    let before = charge(&c, &sim, &key(), &body("before", 100)).await?;
    assert_eq!(before.status(), StatusCode::OK);

    let resp = refuse_for(&c, &sim, 1_500).await?;
    assert_eq!(resp.status(), StatusCode::OK);
    let connection = resp.headers().get("connection").cloned();
    assert_eq!(
        connection.as_ref().map(|v| v.as_bytes()),
        Some(&b"close"[..])
    );
    assert_eq!(
        resp.json::<Value>().await?,
        json!({"ok": true, "for_ms": 1500})
    );
    // The answer came once the socket was closed: a connect is refused at once, and a
    // charge from a fresh client never gets to send a byte.
    let err = TcpStream::connect(sim.addr).await.err();
    assert_eq!(err.map(|e| e.kind()), Some(ErrorKind::ConnectionRefused));
    let fresh = client(Duration::from_secs(5))?;
    let during = charge(&fresh, &sim, &key(), &body("during", 100)).await;
    assert!(matches!(during, Err(ref e) if e.is_connect()), "{during:?}");

    until_refused(sim.addr, false, Duration::from_secs(10)).await?;
    let after = charge(&fresh, &sim, &key(), &body("after", 100)).await?;
    assert_eq!(after.status(), StatusCode::OK);
    let l = ledger(&fresh, &sim).await?;
    let orders: Vec<&str> = l.entries.iter().map(|e| e.order_id.as_str()).collect();
    assert_eq!(orders, ["before", "after"]);
    assert_eq!(
        (l.stats.charge_requests, l.stats.refusal_windows),
        (2, 1),
        "the charge sent during the window never reached the simulator"
    );
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn refuse_rejects_a_bad_length() -> TestResult {
    let sim = start(SimConfig::default()).await?;
    let c = client(Duration::from_secs(5))?;
    for body in [json!({"for_ms": 0}), json!({"for_ms": -1}), json!({})] {
        let resp = c
            .post(format!("{}/control/refuse", sim.url()))
            .json(&body)
            .send()
            .await?;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{body}");
    }
    assert_eq!(refused(sim.addr).await?, Some(false));
    assert_eq!(ledger(&c, &sim).await?.stats.refusal_windows, 0);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn refusal_cuts_requests_in_flight_executed_ones_stay_in_the_ledger() -> TestResult {
    // A charge executed, its reply held: the window cuts it; it stays charged.
    let sim = start_with(Faults {
        p_timeout_after_charge: 1.0,
        hold_ms: 30_000,
        ..Faults::default()
    })
    .await?;
    let c = client(Duration::from_secs(20))?;
    let held = tokio::spawn({
        let (c, url, k) = (c.clone(), sim.url(), key());
        async move {
            c.post(format!("{url}/v1/charges"))
                .header(IDEMPOTENCY_KEY_HEADER, k)
                .json(&body("held", 100))
                .send()
                .await
        }
    });
    ledger_when(&c, &sim, Duration::from_secs(10), |l| l.entries.len() == 1).await?;
    let control = client(Duration::from_secs(5))?;
    assert_eq!(
        refuse_for(&control, &sim, 500).await?.status(),
        StatusCode::OK
    );
    assert_cut(held.await?);
    until_refused(sim.addr, false, Duration::from_secs(10)).await?;
    let c = client(Duration::from_secs(5))?;
    let l = ledger_when(&c, &sim, Duration::from_secs(10), |l| {
        l.stats.cut_in_flight == 1
    })
    .await?;
    assert_eq!(l.entries.len(), 1);
    assert_eq!(l.entries[0].order_id, "held");

    // A charge received but not yet decided (in its latency): cut, never executed.
    put_faults(
        &c,
        &sim,
        &Faults {
            latency_ms: 30_000,
            ..Faults::default()
        },
    )
    .await?;
    let slow = tokio::spawn({
        let (c, url, k) = (c.clone(), sim.url(), key());
        async move {
            c.post(format!("{url}/v1/charges"))
                .header(IDEMPOTENCY_KEY_HEADER, k)
                .json(&body("slow", 100))
                .send()
                .await
        }
    });
    ledger_when(&c, &sim, Duration::from_secs(10), |l| {
        l.stats.charge_requests == 2
    })
    .await?;
    let control = client(Duration::from_secs(5))?;
    assert_eq!(
        refuse_for(&control, &sim, 500).await?.status(),
        StatusCode::OK
    );
    assert_cut(slow.await?);
    until_refused(sim.addr, false, Duration::from_secs(10)).await?;
    let c = client(Duration::from_secs(5))?;
    let l = ledger_when(&c, &sim, Duration::from_secs(10), |l| {
        l.stats.cut_in_flight == 2
    })
    .await?;
    let orders: Vec<&str> = l.entries.iter().map(|e| e.order_id.as_str()).collect();
    assert_eq!(orders, ["held"], "the undecided charge never executed");
    assert_eq!((l.stats.executed, l.stats.refusal_windows), (1, 2));
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn scheduled_windows_come_and_go() -> TestResult {
    let sim = start_with(Faults {
        refuse_at_ms: 200,
        refuse_for_ms: 600,
        refuse_every_ms: 1_500,
        ..Faults::default()
    })
    .await?;
    // Two windows, each refused then listening again.
    for _ in 0..2 {
        until_refused(sim.addr, true, Duration::from_secs(10)).await?;
        until_refused(sim.addr, false, Duration::from_secs(10)).await?;
    }
    let c = client(Duration::from_secs(5))?;
    assert_eq!(
        charge(&c, &sim, &key(), &body("o", 1)).await?.status(),
        StatusCode::OK
    );
    assert!(ledger(&c, &sim).await?.stats.refusal_windows >= 2);
    // Faults without a schedule stop the windows.
    put_faults(&c, &sim, &Faults::default()).await?;
    let windows = ledger(&c, &sim).await?.stats.refusal_windows;
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert_eq!(refused(sim.addr).await?, Some(false));
    assert_eq!(ledger(&c, &sim).await?.stats.refusal_windows, windows);
    sim.shutdown().await;
    Ok(())
}
