//! Answers the Stripe adapter does not take as they are: Stripe's words
//! stored bounded and NUL-free, a PaymentIntent id that cannot be stored
//! never kept (never an approval with an altered id), and a redirect never
//! followed and never a decline.

use super::*;

#[tokio::test]
async fn stripes_words_are_stored_bounded_and_nul_free_and_an_unusable_id_is_never_kept() {
    let c = call(Some("pi_9"), false);
    let key = c.key.to_string();
    let long = "Your card was declined.\0 ".repeat(4_000);
    let err = json!({"error": {"type": "card_error", "code": "card_declined",
        "decline_code": format!("do_not\0honor{long}"), "message": long, "param": long}});
    let mut failed = intent("pi_9", "requires_payment_method", &key);
    failed["last_payment_error"] = err["error"].clone();
    let f = Fake::start(vec![
        (402, err.clone(), None),
        // A confirm answered with a PaymentIntent whose id cannot be stored.
        (200, intent("pi_\0_9", "succeeded", &key), None),
        // A create that returns one: not created (nothing to record).
        (200, intent("pi_\0", "requires_confirmation", &key), None),
        // A decline read back by lookup.
        (200, failed, None),
    ])
    .await;
    let got = f.gw.charge(&c).await;
    let ChargeOutcome::Declined { code, evidence, .. } = &got else {
        panic!("{got:?}");
    };
    assert!(code.len() <= 64 && !code.contains('\0'), "{code}");
    assert!(code.starts_with(r"do_not\u0000honor"), "{code}");
    let detail = evidence.detail.clone().unwrap_or_default();
    assert!(detail.len() <= 1000 && !detail.contains('\0'), "{detail}");

    let approved_bad_id = f.gw.charge(&c).await;
    assert!(
        matches!(&approved_bad_id, ChargeOutcome::Unknown { evidence } if evidence.error_kind == "bad_body"),
        "never an approval with an altered id: {approved_bad_id:?}"
    );
    let created = f.gw.prepare(&call(None, false)).await;
    assert!(
        matches!(
            created,
            Prepared::Failed(ChargeOutcome::Deferred {
                why: Deferral::Unconfirmed,
                ..
            })
        ),
        "{created:?}"
    );
    let by_ref = LookupCall {
        gateway_ref: Some("pi_9".into()),
        ..LookupCall::by_key(c.key)
    };
    let found = f.gw.lookup(&by_ref).await;
    assert!(
        matches!(&found, LookupOutcome::Declined { code, evidence, .. }
            if code.len() <= 64 && !code.contains('\0')
                && evidence.detail.as_ref().is_some_and(|d| d.len() <= 1000 && !d.contains('\0'))),
        "{found:?}"
    );
}

#[tokio::test]
async fn a_redirect_is_never_followed_and_never_a_decline() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // Where a followed redirect would land: it counts and approves.
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = hits.clone();
    let elsewhere = Router::new().fallback(move || {
        seen.fetch_add(1, Ordering::SeqCst);
        async { axum::Json(json!({"id": "pi_elsewhere", "status": "succeeded"})) }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let other = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, elsewhere).await.unwrap() });
    let app = Router::new().fallback(move |uri: axum::http::Uri| {
        let to = format!("{other}{}", uri.path());
        let status = if uri.path().ends_with("/confirm") || uri.path() == "/v1/refunds" {
            StatusCode::TEMPORARY_REDIRECT
        } else if uri.path() == "/v1/payment_intents" {
            StatusCode::SEE_OTHER
        } else {
            StatusCode::PERMANENT_REDIRECT
        };
        async move { (status, [(axum::http::header::LOCATION, to)]) }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let gw = scripted_gateway(url, FindConfig::default());

    let c = call(Some("pi_7"), false);
    let confirm = gw.charge(&c).await;
    assert!(
        matches!(&confirm, ChargeOutcome::Deferred { why: Deferral::NotExecuted, evidence, .. }
            if evidence.error_kind == "redirected" && evidence.http_status == Some(307)),
        "{confirm:?}"
    );
    let refund = gw
        .refund(&RefundCall {
            key: IdempotencyKey::generate(),
            charge_id: "pi_7".into(),
            order_id: OrderId::parse("ord-1").unwrap(),
            amount: Amount::parse(100).unwrap(),
            currency: Currency::parse("EUR").unwrap(),
        })
        .await;
    assert!(
        matches!(
            &refund,
            ChargeOutcome::Deferred {
                why: Deferral::NotExecuted,
                ..
            }
        ),
        "{refund:?}"
    );
    // A 303 to the create: an unconfirmed PaymentIntent moves no money.
    let create = gw.prepare(&call(None, false)).await;
    assert!(
        matches!(&create, Prepared::Failed(ChargeOutcome::Deferred { why: Deferral::Unconfirmed, evidence, .. })
            if evidence.error_kind == "redirected"),
        "{create:?}"
    );
    let by_ref = LookupCall {
        gateway_ref: Some("pi_7".into()),
        ..LookupCall::by_key(c.key)
    };
    let found = gw.lookup(&by_ref).await;
    assert!(
        matches!(&found, LookupOutcome::Failed { evidence } if evidence.error_kind == "redirected"),
        "{found:?}"
    );
    let probe = gw.probe().await;
    assert!(
        matches!(&probe, LookupOutcome::Failed { evidence } if evidence.error_kind == "redirected"),
        "{probe:?}"
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "nothing reached the other host"
    );
}
