//! HTTP tests of record-on-complete mode, the gateway on which a charge still processing is
//! invisible: during a held reply (or `execution_ms`) a lookup answers `not_found`, a resend
//! with the same key charges again without idempotency (the double charge a client must
//! avoid) and gets 409 `idempotency_key_in_use` with it; at the end of the hold the charge
//! is in the ledger, even if the client gave up. Without the mode, the same slow charge is
//! visible at once.
//!
//! Invariant: each test starts its own simulator and checks over HTTP what a client could
//! see while the charge was in flight and what the ledger holds afterwards.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::*;

/// Holds every reply 3 s and records each charge or refund only at the end of it.
fn held_until_complete() -> Faults {
    Faults {
        record_on_complete: true,
        p_timeout_after_charge: 1.0,
        hold_ms: 3_000,
        ..Faults::default()
    }
}

/// A charge sent in the background.
fn charge_in_background(
    c: &Client,
    sim: &SimHandle,
    k: &str,
    b: ChargeBody,
) -> JoinHandle<reqwest::Result<reqwest::Response>> {
    let (c, url, k) = (c.clone(), sim.url(), k.to_owned());
    tokio::spawn(async move {
        c.post(format!("{url}/v1/charges"))
            .header(IDEMPOTENCY_KEY_HEADER, k)
            .json(&b)
            .send()
            .await
    })
}

async fn assert_not_found(resp: reqwest::Response) -> TestResult {
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert_eq!(resp.json::<Value>().await?, json!({"error": "not_found"}));
    Ok(())
}

#[tokio::test]
async fn a_held_charge_is_invisible_until_its_hold_ends() -> TestResult {
    let sim = start_with(held_until_complete()).await?;
    let c = client(Duration::from_secs(20))?;
    let k = key();
    let first = charge_in_background(&c, &sim, &k, body("o", 900));
    let during = ledger_when(&c, &sim, Duration::from_secs(10), |l| l.stats.deferred == 1).await?;
    assert!(during.entries.is_empty());
    assert_not_found(lookup(&c, &sim, &k).await?).await?;
    // Idempotent: a resend while the first is in flight executes nothing (Stripe's 409).
    let resend = charge(&c, &sim, &k, &body("o", 900)).await?;
    assert_eq!(resend.status(), StatusCode::CONFLICT);
    assert_eq!(
        resend.json::<Value>().await?,
        json!({"error": "idempotency_key_in_use"})
    );
    assert!(!first.is_finished(), "the checks above ran during the hold");

    let first = first.await??;
    assert_eq!(first.status(), StatusCode::OK);
    let result: ChargeResult = first.json().await?;
    let l = ledger(&c, &sim).await?;
    assert_eq!(l.entries.len(), 1);
    assert_eq!(l.entries[0].charge_id, result.charge_id);
    let found: ChargeResult = lookup(&c, &sim, &k).await?.json().await?;
    assert_eq!(found, result);
    // Once complete, the key replays as usual.
    put_faults(&c, &sim, &Faults::default()).await?;
    let replay: ChargeResult = charge(&c, &sim, &k, &body("o", 900)).await?.json().await?;
    assert_eq!(replay, result);
    let l = ledger(&c, &sim).await?;
    assert_eq!((l.entries.len(), l.stats.replays), (1, 1));
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn without_idempotency_a_resend_during_the_hold_charges_twice() -> TestResult {
    let sim = start(SimConfig {
        idempotent: false,
        faults: held_until_complete(),
        ..SimConfig::default()
    })
    .await?;
    let c = client(Duration::from_secs(20))?;
    let k = key();
    let first = charge_in_background(&c, &sim, &k, body("o", 900));
    ledger_when(&c, &sim, Duration::from_secs(10), |l| l.stats.deferred == 1).await?;
    // The client finds nothing and sends again with the same key, as a naive retry would.
    assert_not_found(lookup(&c, &sim, &k).await?).await?;
    let second = charge_in_background(&c, &sim, &k, body("o", 900));
    let both = ledger_when(&c, &sim, Duration::from_secs(10), |l| l.stats.deferred == 2).await?;
    assert!(both.entries.is_empty());
    assert!(
        !first.is_finished(),
        "the resend went out during the first hold"
    );

    let first: ChargeResult = first.await??.json().await?;
    let second: ChargeResult = second.await??.json().await?;
    assert_ne!(first.charge_id, second.charge_id);
    let l = ledger(&c, &sim).await?;
    assert_eq!(l.entries_for_key(&k).count(), 2, "the double charge");
    assert_eq!(l.entries[0].charge_id, first.charge_id);
    let found: ChargeResult = lookup(&c, &sim, &k).await?.json().await?;
    assert_eq!(found, first, "a lookup finds the first entry with the key");
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn the_charge_completes_even_when_the_client_gave_up() -> TestResult {
    let sim = start_with(held_until_complete()).await?;
    let impatient = client(Duration::from_millis(300))?;
    let k = key();
    let gave_up = charge(&impatient, &sim, &k, &body("o", 400)).await;
    assert!(
        matches!(gave_up, Err(ref e) if e.is_timeout()),
        "{gave_up:?}"
    );
    let c = client(Duration::from_secs(5))?;
    let l = ledger_when(&c, &sim, Duration::from_secs(10), |l| l.entries.len() == 1).await?;
    assert_eq!(l.entries[0].idempotency_key, k);
    assert_eq!(lookup(&c, &sim, &k).await?.status(), StatusCode::OK);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn execution_time_is_visible_at_once_unless_recorded_on_complete() -> TestResult {
    let slow = Faults {
        execution_ms: 3_000,
        ..Faults::default()
    };
    let sim = start_with(slow.clone()).await?;
    let c = client(Duration::from_secs(20))?;

    // Recorded on arrival: found while its reply is still on the way.
    let k = key();
    let visible = charge_in_background(&c, &sim, &k, body("visible", 100));
    ledger_when(&c, &sim, Duration::from_secs(10), |l| l.entries.len() == 1).await?;
    assert_eq!(lookup(&c, &sim, &k).await?.status(), StatusCode::OK);
    assert!(!visible.is_finished());
    let charged: ChargeResult = visible.await??.json().await?;

    // Recorded on completion: a refund processing is invisible too.
    let on_complete = Faults {
        record_on_complete: true,
        ..slow
    };
    put_faults(&c, &sim, &on_complete).await?;
    let rk = key();
    let refunding = tokio::spawn({
        let (c, url, rk) = (c.clone(), sim.url(), rk.clone());
        let b = refund_body(&charged.charge_id, "visible", 100);
        async move {
            c.post(format!("{url}/v1/refunds"))
                .header(IDEMPOTENCY_KEY_HEADER, rk)
                .json(&b)
                .send()
                .await
        }
    });
    let during = ledger_when(&c, &sim, Duration::from_secs(10), |l| l.stats.deferred == 1).await?;
    assert!(during.refunds.is_empty());
    assert_not_found(lookup_refund(&c, &sim, &rk).await?).await?;
    assert!(!refunding.is_finished());
    let refunded: RefundResult = refunding.await??.json().await?;
    assert!(refunded.is_approved());
    let found: RefundResult = lookup_refund(&c, &sim, &rk).await?.json().await?;
    assert_eq!(found, refunded);
    assert_eq!(ledger(&c, &sim).await?.refunds.len(), 1);
    sim.shutdown().await;
    Ok(())
}
