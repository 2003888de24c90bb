//! HTTP tests of record-on-complete mode, the gateway on which a charge still processing is
//! invisible: during a held reply (or `execution_ms`) a lookup answers `not_found`, a resend
//! with the same key charges again without idempotency (the double charge a client must
//! avoid) and gets 409 `idempotency_key_in_use` with it; at the end of the hold the charge
//! is in the ledger, even if the client gave up. Without the mode, the same slow charge is
//! visible at once.
//!
//! Invariant: each test starts its own simulator and checks over HTTP what a client could
//! see while the charge was in flight and what the ledger holds afterwards.

use super::*;

/// Holds every reply 3 s and records each charge or refund only at the end of it.
fn held_until_complete() -> Faults {
    faults(|f| {
        f.record_on_complete = true;
        f.p_timeout_after_charge = 1.0;
        f.hold_ms = 3_000;
    })
}

#[tokio::test]
async fn a_held_charge_is_invisible_until_its_hold_ends() -> TestResult {
    let sim = Sim::faulty(held_until_complete())
        .await?
        .timeout(Duration::from_secs(20))?;
    let k = key();
    let first = sim.charge_later(&k, body("o", 900));
    let during = sim.ledger_when(|l| l.stats.deferred == 1).await?;
    assert!(during.entries.is_empty());
    assert_error(sim.lookup(&k).await?, StatusCode::NOT_FOUND, "not_found").await?;
    // Idempotent: a resend while the first is in flight executes nothing (Stripe's 409).
    let resend = sim.charge(&k, &body("o", 900)).await?;
    assert_error(resend, StatusCode::CONFLICT, "idempotency_key_in_use").await?;
    assert!(!first.is_finished(), "the checks above ran during the hold");

    let result: ChargeResult = expect_json(first.await??, StatusCode::OK).await?;
    let l = sim.ledger().await?;
    assert_eq!(l.entries.len(), 1);
    assert_eq!(l.entries[0].charge_id, result.charge_id);
    let found: ChargeResult = sim.lookup(&k).await?.json().await?;
    assert_eq!(found, result);
    // Once complete, the key replays as usual.
    sim.put_faults(&Faults::default()).await?;
    let replay: ChargeResult = sim.charge(&k, &body("o", 900)).await?.json().await?;
    assert_eq!(replay, result);
    let l = sim.ledger().await?;
    assert_eq!((l.entries.len(), l.stats.replays), (1, 1));
    sim.stop().await
}

#[tokio::test]
async fn without_idempotency_a_resend_during_the_hold_charges_twice() -> TestResult {
    let cfg = config(|c| {
        c.idempotent = false;
        c.faults = held_until_complete();
    });
    let sim = Sim::with(cfg).await?.timeout(Duration::from_secs(20))?;
    let k = key();
    let first = sim.charge_later(&k, body("o", 900));
    sim.ledger_when(|l| l.stats.deferred == 1).await?;
    // The client finds nothing and sends again with the same key, as a naive retry would.
    assert_error(sim.lookup(&k).await?, StatusCode::NOT_FOUND, "not_found").await?;
    let second = sim.charge_later(&k, body("o", 900));
    let both = sim.ledger_when(|l| l.stats.deferred == 2).await?;
    assert!(both.entries.is_empty());
    assert!(
        !first.is_finished(),
        "the resend went out during the first hold"
    );

    let first: ChargeResult = first.await??.json().await?;
    let second: ChargeResult = second.await??.json().await?;
    assert_ne!(first.charge_id, second.charge_id);
    let l = sim.ledger().await?;
    assert_eq!(l.entries_for_key(&k).count(), 2, "the double charge");
    assert_eq!(l.entries[0].charge_id, first.charge_id);
    let found: ChargeResult = sim.lookup(&k).await?.json().await?;
    assert_eq!(found, first, "a lookup finds the first entry with the key");
    sim.stop().await
}

#[tokio::test]
async fn the_charge_completes_even_when_the_client_gave_up() -> TestResult {
    let sim = Sim::faulty(held_until_complete()).await?;
    let impatient = sim.client(Duration::from_millis(300))?;
    let k = key();
    let gave_up = impatient.charge(&k, &body("o", 400)).await;
    assert!(
        matches!(gave_up, Err(ref e) if e.is_timeout()),
        "{gave_up:?}"
    );
    let l = sim.ledger_when(|l| l.entries.len() == 1).await?;
    assert_eq!(l.entries[0].idempotency_key, k);
    assert_eq!(sim.lookup(&k).await?.status(), StatusCode::OK);
    sim.stop().await
}

#[tokio::test]
async fn execution_time_is_visible_at_once_unless_recorded_on_complete() -> TestResult {
    let slow = faults(|f| f.execution_ms = 3_000);
    let sim = Sim::faulty(slow.clone())
        .await?
        .timeout(Duration::from_secs(20))?;

    // Recorded on arrival: found while its reply is still on the way.
    let k = key();
    let visible = sim.charge_later(&k, body("visible", 100));
    sim.ledger_when(|l| l.entries.len() == 1).await?;
    assert_eq!(sim.lookup(&k).await?.status(), StatusCode::OK);
    assert!(!visible.is_finished());
    let charged: ChargeResult = visible.await??.json().await?;

    // Recorded on completion: a refund processing is invisible too.
    let on_complete = Faults {
        record_on_complete: true,
        ..slow
    };
    sim.put_faults(&on_complete).await?;
    let rk = key();
    let refunding = sim.refund_later(&rk, refund_of(&charged, 100));
    let during = sim.ledger_when(|l| l.stats.deferred == 1).await?;
    assert!(during.refunds.is_empty());
    let hidden = sim.lookup_refund(&rk).await?;
    assert_error(hidden, StatusCode::NOT_FOUND, "not_found").await?;
    assert!(!refunding.is_finished());
    let refunded: RefundResult = refunding.await??.json().await?;
    assert!(refunded.is_approved());
    let found: RefundResult = sim.lookup_refund(&rk).await?.json().await?;
    assert_eq!(found, refunded);
    assert_eq!(sim.ledger().await?.refunds.len(), 1);
    sim.stop().await
}
