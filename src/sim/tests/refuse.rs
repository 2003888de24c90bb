//! HTTP tests of refusal windows: while one is open a TCP connect is refused (nothing
//! listens on the port), afterwards the simulator listens again on the same address with
//! its ledger; requests in flight when a window begins are cut, those already executed stay
//! in the ledger and the others never execute; scheduled windows come and go on their own.
//!
//! Invariant: each test starts its own simulator and checks over HTTP (or a raw TCP connect)
//! that nothing was executed while nothing was listening.

use std::io::ErrorKind;

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
/// 10 s.
async fn until_refused(addr: SocketAddr, want: bool) -> TestResult {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while refused(addr).await? != Some(want) {
        if tokio::time::Instant::now() > deadline {
            return Err(format!("connects never became refused = {want}").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

impl Api {
    async fn refuse_for(&self, for_ms: u64) -> reqwest::Result<Response> {
        self.refuse(&json!({ "for_ms": for_ms })).await
    }

    async fn refuse(&self, body: &Value) -> reqwest::Result<Response> {
        self.post("/control/refuse").json(body).send().await
    }
}

/// A request cut by an outage: an error without a status and without a timeout.
fn assert_cut(result: reqwest::Result<Response>) {
    match result {
        Ok(resp) => panic!("expected a cut connection, got HTTP {}", resp.status()),
        Err(e) => assert!(!e.is_timeout() && e.status().is_none(), "{e:?}"),
    }
}

/// Opens a 500 ms refusal window (asked by a fresh client), asserts that the request
/// `in_flight` was cut, waits until the simulator listens again, and returns a fresh 5 s
/// client, with no connection from before the window.
async fn cut_by_a_window(
    sim: &Sim,
    in_flight: JoinHandle<reqwest::Result<Response>>,
) -> TestResult<Api> {
    let control = sim.client(Duration::from_secs(5))?;
    assert_eq!(control.refuse_for(500).await?.status(), StatusCode::OK);
    assert_cut(in_flight.await?);
    until_refused(sim.addr(), false).await?;
    sim.client(Duration::from_secs(5))
}

#[tokio::test]
async fn refusal_window_refuses_connects_then_listens_again_with_the_same_ledger() -> TestResult {
    let sim = Sim::start().await?;
    let before = sim.charge(&key(), &body("before", 100)).await?;
    assert_eq!(before.status(), StatusCode::OK);

    let resp = sim.refuse_for(1_500).await?;
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
    let err = TcpStream::connect(sim.addr()).await.err();
    assert_eq!(err.map(|e| e.kind()), Some(ErrorKind::ConnectionRefused));
    let fresh = sim.client(Duration::from_secs(5))?;
    let during = fresh.charge(&key(), &body("during", 100)).await;
    assert!(matches!(during, Err(ref e) if e.is_connect()), "{during:?}");

    until_refused(sim.addr(), false).await?;
    let after = fresh.charge(&key(), &body("after", 100)).await?;
    assert_eq!(after.status(), StatusCode::OK);
    let l = fresh.ledger().await?;
    let orders: Vec<&str> = l.entries.iter().map(|e| e.order_id.as_str()).collect();
    assert_eq!(orders, ["before", "after"]);
    assert_eq!(
        (l.stats.charge_requests, l.stats.refusal_windows),
        (2, 1),
        "the charge sent during the window never reached the simulator"
    );
    sim.stop().await
}

#[tokio::test]
async fn refuse_rejects_a_bad_length() -> TestResult {
    let sim = Sim::start().await?;
    for body in [json!({"for_ms": 0}), json!({"for_ms": -1}), json!({})] {
        let resp = sim.refuse(&body).await?;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{body}");
    }
    assert_eq!(refused(sim.addr()).await?, Some(false));
    assert_eq!(sim.ledger().await?.stats.refusal_windows, 0);
    sim.stop().await
}

#[tokio::test]
async fn refusal_cuts_requests_in_flight_executed_ones_stay_in_the_ledger() -> TestResult {
    // A charge executed, its reply held: the window cuts it; it stays charged.
    let sim = Sim::faulty(faults(|f| {
        f.p_timeout_after_charge = 1.0;
        f.hold_ms = 30_000;
    }))
    .await?
    .timeout(Duration::from_secs(20))?;
    let held = sim.charge_later(&key(), body("held", 100));
    sim.ledger_when(|l| l.entries.len() == 1).await?;
    let c = cut_by_a_window(&sim, held).await?;
    let l = c.ledger_when(|l| l.stats.cut_in_flight == 1).await?;
    assert_eq!(l.entries.len(), 1);
    assert_eq!(l.entries[0].order_id, "held");

    // A charge received but not yet decided (in its latency): cut, never executed.
    c.put_faults(&faults(|f| f.latency_ms = 30_000)).await?;
    let slow = c.charge_later(&key(), body("slow", 100));
    c.ledger_when(|l| l.stats.charge_requests == 2).await?;
    let c = cut_by_a_window(&sim, slow).await?;
    let l = c.ledger_when(|l| l.stats.cut_in_flight == 2).await?;
    let orders: Vec<&str> = l.entries.iter().map(|e| e.order_id.as_str()).collect();
    assert_eq!(orders, ["held"], "the undecided charge never executed");
    assert_eq!((l.stats.executed, l.stats.refusal_windows), (1, 2));
    sim.stop().await
}

#[tokio::test]
async fn scheduled_windows_come_and_go() -> TestResult {
    let sim = Sim::faulty(faults(|f| {
        f.refuse_at_ms = 200;
        f.refuse_for_ms = 600;
        f.refuse_every_ms = 1_500;
    }))
    .await?;
    // Two windows, each refused then listening again.
    for _ in 0..2 {
        until_refused(sim.addr(), true).await?;
        until_refused(sim.addr(), false).await?;
    }
    let resp = sim.charge(&key(), &body("o", 1)).await?;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(sim.ledger().await?.stats.refusal_windows >= 2);
    // Faults without a schedule stop the windows.
    sim.put_faults(&Faults::default()).await?;
    let windows = sim.ledger().await?.stats.refusal_windows;
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert_eq!(refused(sim.addr()).await?, Some(false));
    assert_eq!(sim.ledger().await?.stats.refusal_windows, windows);
    sim.stop().await
}
