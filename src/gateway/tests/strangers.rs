//! A gateway's answer in a stranger's words: a decline's code and message
//! stored bounded and NUL-free, an id that cannot be stored kept as none
//! (a decline) or never taken (an approval is unknown, a lookup failed),
//! never altered into another id.

use super::*;

/// A gateway whose every answer is `status` with `body`, on 127.0.0.1.
async fn answering_body(status: u16, body: serde_json::Value) -> TestResult<String> {
    use axum::http::StatusCode;
    let app = axum::Router::new().fallback(move || {
        let body = body.clone();
        async move { (StatusCode::from_u16(status).unwrap(), axum::Json(body)) }
    });
    serve(app).await
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

/// A gateway whose every answer is `status` with `body` as plain text.
async fn answering_text(status: u16, body: &'static str) -> TestResult<String> {
    use axum::http::StatusCode;
    let app = axum::Router::new()
        .fallback(move || async move { (StatusCode::from_u16(status).unwrap(), body) });
    serve(app).await
}

/// A 400, 402 or 422 that is not in the gateway's words (a proxy's or a
/// firewall's page, an object without the gateway's `error` or `status`)
/// is no decline: the request may or may not have reached the gateway, so
/// the charge or refund is unknown and looked up, never declined on it.
#[tokio::test]
async fn a_refusal_not_in_the_gateways_words_is_not_a_decline() -> TestResult {
    let json = [
        (400, serde_json::json!({})),
        (422, serde_json::json!({"message": "unprocessable"})),
        (402, serde_json::json!({})),
        (402, serde_json::json!({"error": "payment required"})),
    ];
    let mut urls = Vec::new();
    for (status, body) in json {
        urls.push((status, answering_body(status, body).await?));
    }
    for status in [400, 402, 422] {
        urls.push((
            status,
            answering_text(status, "<html>Bad Request</html>").await?,
        ));
    }
    for (status, url) in urls {
        let gw = gateway_at(&url)?;
        let charge = gw.charge(&charge_call("order-proxy", 1000)?).await;
        let refund = gw.refund(&refund_call("ch_1", "order-proxy", 500)?).await;
        for outcome in [charge, refund] {
            let ChargeOutcome::Unknown { evidence } = &outcome else {
                panic!("{status}: {outcome:?}");
            };
            assert_eq!(evidence.http_status, Some(status));
            assert_eq!(evidence.error_kind, "http_4xx_unexpected");
        }
    }
    // The gateway's own refusal and decline stay definite.
    let refused = answering_body(400, serde_json::json!({"error": "invalid_amount"})).await?;
    let outcome = gateway_at(&refused)?
        .charge(&charge_call("order-proxy", 1000)?)
        .await;
    assert!(
        matches!(&outcome, ChargeOutcome::Declined { code, .. } if code == "invalid_amount"),
        "{outcome:?}"
    );
    Ok(())
}
