//! Refunds and refund lookups through the adapter against a real
//! simulator, classified like charges: approved (with the refund's id),
//! declined (an over-refund, for good), unknown (a lost answer, a 5xx, a
//! key reused with another amount), not found; the evidence names the
//! call (`refund` or `refund_lookup`).

use super::*;
use crate::sim::AMOUNT_EXCEEDS_CHARGE;

#[tokio::test]
async fn approved_refund_carries_the_refund_id() -> TestResult {
    let sim = start_sim().await?;
    let gw = gateway(&sim)?;
    let charge_id = approved_charge(&gw, "order-r1", 1000).await?;
    let call = refund_call(&charge_id, "order-r1", 400)?;
    let outcome = gw.refund(&call).await;
    let l = ledger(&sim).await?;
    assert_eq!(l.refunds.len(), 1);
    let ChargeOutcome::Approved {
        charge_id: refund_id,
        evidence,
    } = outcome
    else {
        panic!("expected an approval, got {outcome:?}");
    };
    assert_eq!(refund_id, l.refunds[0].refund_id);
    assert_eq!(l.refunds[0].charge_id, charge_id);
    assert_eq!(l.refunds[0].idempotency_key, call.key.to_string());
    assert_eq!(
        (
            evidence.call.as_str(),
            evidence.http_status,
            evidence.error_kind.as_str()
        ),
        ("refund", Some(200), "ok")
    );
    // The refund's key finds the refund; the charge lookup is unchanged.
    let found = gw.lookup_refund(&LookupCall::by_key(call.key)).await;
    assert!(
        matches!(found, LookupOutcome::Approved { ref charge_id, ref evidence }
            if *charge_id == refund_id && evidence.call == "refund_lookup"),
        "{found:?}"
    );
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn over_refund_is_declined_definitely() -> TestResult {
    let sim = start_sim().await?;
    let gw = gateway(&sim)?;
    let charge_id = approved_charge(&gw, "order-r2", 1000).await?;
    let call = refund_call(&charge_id, "order-r2", 1001)?;
    let outcome = gw.refund(&call).await;
    let l = ledger(&sim).await?;
    let ChargeOutcome::Declined {
        code,
        charge_id: refund_id,
        evidence,
    } = outcome
    else {
        panic!("expected a decline, got {outcome:?}");
    };
    assert_eq!(code, AMOUNT_EXCEEDS_CHARGE);
    assert_eq!(refund_id.as_deref(), Some(l.refunds[0].refund_id.as_str()));
    assert_eq!(
        (
            evidence.call.as_str(),
            evidence.http_status,
            evidence.error_kind.as_str()
        ),
        ("refund", Some(402), "declined")
    );
    let found = gw.lookup_refund(&LookupCall::by_key(call.key)).await;
    assert!(
        matches!(found, LookupOutcome::Declined { ref code, .. } if code == AMOUNT_EXCEEDS_CHARGE),
        "{found:?}"
    );
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn lost_refund_response_is_unknown_then_the_lookup_says_approved() -> TestResult {
    let sim = start_sim().await?;
    let gw = gateway(&sim)?;
    let charge_id = approved_charge(&gw, "order-r3", 1000).await?;
    set_faults(
        &sim,
        &Faults {
            p_response_lost: 1.0,
            ..Faults::default()
        },
    )
    .await?;
    let call = refund_call(&charge_id, "order-r3", 1000)?;
    let outcome = gw.refund(&call).await;
    assert!(
        matches!(outcome, ChargeOutcome::Unknown { ref evidence }
            if evidence.call == "refund"
                && evidence.http_status.is_none()
                && evidence.error_kind == "connection_closed"),
        "{outcome:?}"
    );
    let l = ledger(&sim).await?;
    assert_eq!(l.refunds.len(), 1, "executed although the answer was lost");
    let found = gw.lookup_refund(&LookupCall::by_key(call.key)).await;
    let LookupOutcome::Approved {
        charge_id: refund_id,
        evidence,
    } = found
    else {
        panic!("expected the lookup to find the refund, got {found:?}");
    };
    assert_eq!(refund_id, l.refunds[0].refund_id);
    assert_eq!(
        (evidence.call.as_str(), evidence.lookup_result.as_deref()),
        ("refund_lookup", Some("approved"))
    );
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn refund_lookup_of_an_unknown_key_is_not_found_and_a_5xx_failed() -> TestResult {
    let sim = start_sim().await?;
    let gw = gateway(&sim)?;
    let found = gw
        .lookup_refund(&LookupCall::by_key(IdempotencyKey::generate()))
        .await;
    assert!(
        matches!(found, LookupOutcome::NotFound { ref evidence }
            if evidence.call == "refund_lookup"
                && evidence.http_status == Some(404)
                && evidence.lookup_result.as_deref() == Some("not_found")),
        "{found:?}"
    );
    set_faults(
        &sim,
        &Faults {
            p_lookup_fail: 1.0,
            ..Faults::default()
        },
    )
    .await?;
    let failed = gw
        .lookup_refund(&LookupCall::by_key(IdempotencyKey::generate()))
        .await;
    assert!(
        matches!(failed, LookupOutcome::Failed { ref evidence }
            if evidence.call == "refund_lookup" && evidence.error_kind == "http_5xx"),
        "{failed:?}"
    );
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn refund_5xx_and_key_reuse_are_unknown_a_refused_body_is_declined() -> TestResult {
    let sim = start_sim().await?;
    let gw = gateway(&sim)?;
    let charge_id = approved_charge(&gw, "order-r5", 1000).await?;
    let first = refund_call(&charge_id, "order-r5", 100)?;
    assert!(matches!(
        gw.refund(&first).await,
        ChargeOutcome::Approved { .. }
    ));
    // Same key, other amount: the simulator's 409 is not a decline.
    let reused = RefundCall {
        amount: Amount::parse(200)?,
        ..first.clone()
    };
    let outcome = gw.refund(&reused).await;
    assert!(
        matches!(outcome, ChargeOutcome::Unknown { ref evidence } if evidence.http_status == Some(409)),
        "{outcome:?}"
    );
    // A body the gateway refuses (400) was never executed: definite.
    let refused = gw.refund(&refund_call("", "order-r5", 100)?).await;
    assert!(
        matches!(refused, ChargeOutcome::Declined { ref evidence, .. }
            if evidence.http_status == Some(400) && evidence.call == "refund"),
        "{refused:?}"
    );
    set_faults(
        &sim,
        &Faults {
            p_5xx: 1.0,
            ..Faults::default()
        },
    )
    .await?;
    let outcome = gw.refund(&refund_call(&charge_id, "order-r5", 100)?).await;
    assert!(
        matches!(outcome, ChargeOutcome::Unknown { ref evidence }
            if evidence.http_status == Some(503) && evidence.error_kind == "http_5xx"),
        "{outcome:?}"
    );
    assert_eq!(ledger(&sim).await?.refunds.len(), 1);
    sim.shutdown().await;
    Ok(())
}
