//! The HTTP adapter against a real simulator on 127.0.0.1: refunds and refund lookups
//! classified like charges (approved, declined, unknown, not found), with the evidence
//! naming the call; and every failure by what the gateway could have done (a refused
//! connection: not sent; a 429 or a 503 with `Retry-After`: not executed; a bare 503:
//! unknown), against a port nobody listens on and a minimal server that answers only that.
//!
//! Invariant: each test starts its own simulator and talks to it only over HTTP, through
//! [`HttpGateway`] or plain reqwest for the control and ledger endpoints.

use std::time::Duration;

use tokio::net::TcpListener;

use super::*;
use crate::sim::{self, AMOUNT_EXCEEDS_CHARGE, Faults, Ledger, SimConfig, SimHandle};

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

async fn start_sim() -> TestResult<SimHandle> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    Ok(sim::spawn(listener, SimConfig::default()).await?)
}

fn gateway(sim: &SimHandle) -> TestResult<HttpGateway> {
    Ok(HttpGateway::new(HttpGatewayConfig {
        base_url: sim.url(),
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_millis(1500),
        ca_file: None,
    })?)
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
    let call = ChargeCall {
        key: IdempotencyKey::generate(),
        attempt_id: None,
        order_id: OrderId::parse(order)?,
        amount: Amount::parse(amount_minor)?,
        currency: Currency::parse("EUR")?,
        payment_method: None,
        customer: None,
        gateway_ref: None,
        merchant_initiated: false,
    };
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

/// A gateway whose every answer is `status` with `Retry-After: retry_after`
/// (when given), on 127.0.0.1, for the adapter's classification.
async fn answering(status: u16, retry_after: Option<&'static str>) -> TestResult<String> {
    use axum::http::{HeaderValue, StatusCode};
    use axum::response::IntoResponse;
    let app = axum::Router::new().fallback(move || async move {
        let mut resp = (
            StatusCode::from_u16(status).unwrap(),
            axum::Json(serde_json::json!({"error": "busy"})),
        )
            .into_response();
        if let Some(ra) = retry_after {
            resp.headers_mut()
                .insert("retry-after", HeaderValue::from_static(ra));
        }
        resp
    });
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

fn gateway_at(url: &str) -> TestResult<HttpGateway> {
    Ok(HttpGateway::new(HttpGatewayConfig {
        base_url: url.into(),
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_millis(1500),
        ca_file: None,
    })?)
}

#[tokio::test]
async fn a_refused_connection_is_not_sent_for_charges_refunds_and_lookups() -> TestResult {
    // A port nobody listens on: the connection is refused, nothing is written.
    let closed = TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    let gw = gateway_at(&format!("http://{closed}"))?;
    let call = charge_call("order-refused", 1000)?;
    for outcome in [
        gw.charge(&call).await,
        gw.refund(&refund_call("ch_1", "o", 1)?).await,
    ] {
        assert!(
            matches!(outcome, ChargeOutcome::Deferred { why: Deferral::NotSent, retry_after: None, ref evidence }
                if evidence.http_status.is_none() && evidence.error_kind == "connect"),
            "{outcome:?}"
        );
    }
    for found in [
        gw.lookup(&LookupCall::by_key(call.key)).await,
        gw.lookup_refund(&LookupCall::by_key(call.key)).await,
    ] {
        assert!(
            matches!(found, LookupOutcome::Deferred { why: Deferral::NotSent, ref evidence, .. }
                if evidence.lookup_result.as_deref() == Some("not_sent")),
            "{found:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_429_or_a_503_with_retry_after_is_not_executed_a_bare_503_is_unknown() -> TestResult {
    let call = charge_call("order-busy", 1000)?;
    let throttled = gateway_at(&answering(429, Some("7")).await?)?;
    let outcome = throttled.charge(&call).await;
    assert!(
        matches!(outcome, ChargeOutcome::Deferred { why: Deferral::NotExecuted, retry_after: Some(d), ref evidence }
            if d == Duration::from_secs(7) && evidence.http_status == Some(429) && evidence.error_kind == "throttled"),
        "{outcome:?}"
    );
    assert!(
        matches!(
            throttled.lookup(&LookupCall::by_key(call.key)).await,
            LookupOutcome::Deferred {
                why: Deferral::NotExecuted,
                ..
            }
        ),
        "a throttled lookup is not a check"
    );
    // A 429 without Retry-After: still not executed; the worker's backoff applies.
    let bare_429 = gateway_at(&answering(429, None).await?)?;
    assert!(matches!(
        bare_429.charge(&call).await,
        ChargeOutcome::Deferred {
            why: Deferral::NotExecuted,
            retry_after: None,
            ..
        }
    ));
    let unavailable = gateway_at(&answering(503, Some("Wed, 21 Oct 2015 07:28:00 GMT")).await?)?;
    let outcome = unavailable.charge(&call).await;
    assert!(
        matches!(outcome, ChargeOutcome::Deferred { why: Deferral::NotExecuted, retry_after: Some(Duration::ZERO), ref evidence }
            if evidence.error_kind == "unavailable"),
        "a date in the past means now: {outcome:?}"
    );
    // A 503 that does not say when to come back may come from a proxy in
    // front of a gateway that did execute: unknown, looked up.
    let bare_503 = gateway_at(&answering(503, None).await?)?;
    assert!(matches!(
        bare_503.charge(&call).await,
        ChargeOutcome::Unknown { .. }
    ));
    assert!(matches!(
        bare_503.lookup(&LookupCall::by_key(call.key)).await,
        LookupOutcome::Failed { .. }
    ));
    Ok(())
}

/// A gateway whose every answer is `status` with `body`, on 127.0.0.1.
async fn answering_body(status: u16, body: serde_json::Value) -> TestResult<String> {
    use axum::http::StatusCode;
    let app = axum::Router::new().fallback(move || {
        let body = body.clone();
        async move { (StatusCode::from_u16(status).unwrap(), axum::Json(body)) }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

/// About 100 KB of a message with a NUL every 20 bytes.
fn long_nul_text() -> String {
    "Tarjeta\0 rechazada, ".repeat(5_000)
}

#[tokio::test]
async fn a_decline_in_a_strangers_words_is_stored_bounded_and_nul_free() -> TestResult {
    let call = charge_call("order-nul", 1000)?;
    let long = long_nul_text();
    assert!(long.len() >= 100_000);
    let gw = gateway_at(
        &answering_body(
            402,
            serde_json::json!({"status": "declined", "decline_code": format!("card\0declined {long}"),
                               "network_decline_code": "05\0", "error": long,
                               "charge_id": "ch_\0bad"}),
        )
        .await?,
    )?;
    let outcome = gw.charge(&call).await;
    let ChargeOutcome::Declined {
        code,
        charge_id,
        evidence,
    } = outcome
    else {
        panic!("still a decline: {outcome:?}");
    };
    assert!(code.len() <= 64 && !code.contains('\0'), "{code}");
    assert!(
        code.starts_with(r"card\u0000declined Tarjeta\u0000 "),
        "{code}"
    );
    assert!(code.ends_with('…'), "{code}");
    // The decline stands; its id cannot be stored as it is: none, noted.
    assert_eq!(charge_id, None);
    let detail = evidence.detail.unwrap_or_default();
    assert_eq!(
        detail,
        r"charge_id holds the control character U+0000: ch_\u0000bad"
    );
    // The same in a lookup's answer.
    let found = gw.lookup(&LookupCall::by_key(call.key)).await;
    assert!(
        matches!(&found, LookupOutcome::Failed { evidence } if evidence.http_status == Some(402)),
        "{found:?}"
    );
    let looked = gateway_at(
        &answering_body(
            200,
            serde_json::json!({"status": "declined", "decline_code": long, "charge_id": "ch_\0"}),
        )
        .await?,
    )?;
    let found = looked.lookup(&LookupCall::by_key(call.key)).await;
    assert!(
        matches!(&found, LookupOutcome::Declined { code, charge_id: None, .. }
            if code.len() <= 64 && !code.contains('\0')),
        "{found:?}"
    );
    // A request refused as such: its error is the code, bounded too.
    let refused = gateway_at(&answering_body(422, serde_json::json!({"error": long})).await?)?;
    let outcome = refused.charge(&call).await;
    assert!(
        matches!(&outcome, ChargeOutcome::Declined { code, evidence, .. }
            if code.len() <= 64 && !code.contains('\0')
                && evidence.detail.as_ref().is_some_and(|d| d.len() <= 1000 && !d.contains('\0'))),
        "{outcome:?}"
    );
    Ok(())
}

#[tokio::test]
async fn an_approval_whose_id_cannot_be_stored_is_unknown_never_altered() -> TestResult {
    let call = charge_call("order-bad-id", 1000)?;
    for bad in ["ch_\0x".to_owned(), "c".repeat(256), String::new()] {
        let gw = gateway_at(
            &answering_body(
                200,
                serde_json::json!({"status": "approved", "charge_id": bad}),
            )
            .await?,
        )?;
        let outcome = gw.charge(&call).await;
        assert!(
            matches!(&outcome, ChargeOutcome::Unknown { evidence }
                if evidence.error_kind == "bad_body"
                    && evidence.detail.as_ref().is_some_and(|d| d.contains("charge_id ") && !d.contains('\0'))),
            "{} bytes: {outcome:?}",
            bad.len()
        );
        let found = gw.lookup(&LookupCall::by_key(call.key)).await;
        assert!(
            matches!(&found, LookupOutcome::Failed { evidence } if evidence.error_kind == "bad_body"),
            "never approved, never \"not found\": {found:?}"
        );
    }
    // 255 bytes is an id.
    let at_bound = "c".repeat(255);
    let gw = gateway_at(
        &answering_body(
            200,
            serde_json::json!({"status": "approved", "charge_id": at_bound}),
        )
        .await?,
    )?;
    assert!(matches!(
        gw.charge(&call).await,
        ChargeOutcome::Approved { charge_id, .. } if charge_id == at_bound
    ));
    Ok(())
}

/// A gateway on 127.0.0.1 that counts every request it gets and approves
/// it: where a followed redirect would land.
async fn counting() -> TestResult<(String, std::sync::Arc<std::sync::atomic::AtomicUsize>)> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = hits.clone();
    let app = axum::Router::new().fallback(move || {
        seen.fetch_add(1, Ordering::SeqCst);
        async { axum::Json(serde_json::json!({"status": "approved", "charge_id": "ch_elsewhere"})) }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((url, hits))
}

/// A gateway whose every answer is `status` with `Location: {to}{path}`.
async fn redirecting(status: u16, to: String) -> TestResult<String> {
    use axum::http::{StatusCode, Uri, header};
    let app = axum::Router::new().fallback(move |uri: Uri| {
        let to = format!("{to}{}", uri.path());
        async move {
            (
                StatusCode::from_u16(status).unwrap(),
                [(header::LOCATION, to)],
            )
        }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

#[tokio::test]
async fn a_redirect_is_never_followed_a_moved_create_was_not_executed_a_lookup_failed() -> TestResult
{
    use std::sync::atomic::Ordering;
    let (elsewhere, hits) = counting().await?;
    let call = charge_call("order-moved", 1000)?;
    for status in [301, 302, 307, 308] {
        let gw = gateway_at(&redirecting(status, elsewhere.clone()).await?)?;
        for outcome in [
            gw.charge(&call).await,
            gw.refund(&refund_call("ch_1", "order-moved", 1)?).await,
        ] {
            assert!(
                matches!(&outcome, ChargeOutcome::Deferred { why: Deferral::NotExecuted, evidence, .. }
                    if evidence.error_kind == "redirected" && evidence.http_status == Some(status)
                        && evidence.detail.as_ref().is_some_and(|d| d.contains(&elsewhere))),
                "{status}: {outcome:?}"
            );
        }
        for found in [
            gw.lookup(&LookupCall::by_key(call.key)).await,
            gw.lookup_refund(&LookupCall::by_key(call.key)).await,
        ] {
            assert!(
                matches!(&found, LookupOutcome::Failed { evidence }
                    if evidence.error_kind == "redirected" && evidence.lookup_result.as_deref() == Some("failed")),
                "{status}: a redirected lookup is no answer, never \"not found\": {found:?}"
            );
        }
    }
    // 303 See Other answers a request that was processed: unknown, looked up.
    let see_other = gateway_at(&redirecting(303, elsewhere.clone()).await?)?;
    let outcome = see_other.charge(&call).await;
    assert!(
        matches!(&outcome, ChargeOutcome::Unknown { evidence } if evidence.error_kind == "redirected"),
        "{outcome:?}"
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "nothing reached the other host"
    );
    // A Location carrying credentials is shown without them.
    let with_secret = gateway_at(&redirecting(307, "http://u:s3cret@127.0.0.1:9".into()).await?)?;
    let outcome = with_secret.charge(&call).await;
    let detail = outcome.evidence().detail.clone().unwrap_or_default();
    assert!(
        detail.contains("http://127.0.0.1:9/v1/charges") && !detail.contains("s3cret"),
        "{detail}"
    );
    Ok(())
}

#[test]
fn retry_after_takes_seconds_or_an_http_date() {
    let now = chrono::DateTime::parse_from_rfc3339("2026-11-30T12:00:00Z")
        .unwrap()
        .to_utc();
    let cases = [
        ("7", Some(7)),
        (" 120 ", Some(120)),
        ("Mon, 30 Nov 2026 12:00:30 GMT", Some(30)),
        ("Mon, 30 Nov 2026 11:00:00 GMT", Some(0)),
        ("soon", None),
        ("-3", None),
    ];
    for (value, want) in cases {
        assert_eq!(
            super::http::retry_after(value, now),
            want.map(Duration::from_secs),
            "{value}"
        );
    }
}
