//! Every failed call classified by what the gateway could have done: a
//! refused connection was not sent; a 429, or a 503 with `Retry-After`,
//! was not executed (and `Retry-After` is read as seconds or an HTTP
//! date); a bare 503 is unknown; a redirect is never followed (a moved
//! create was not executed, a moved lookup failed, a 303 is unknown).

use super::*;

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
    serve(app).await
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
    Ok((serve(app).await?, hits))
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
    serve(app).await
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
            crate::gateway::http::retry_after(value, now),
            want.map(Duration::from_secs),
            "{value}"
        );
    }
}
