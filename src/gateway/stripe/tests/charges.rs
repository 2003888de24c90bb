//! A charge through the Stripe adapter, against the scripted server: the
//! create sends the key, the API version and no confirm; a create refused
//! or unanswered never charges and never declines on a guess; a decline
//! keeps every code, and advice not to retry is final; a confirm refused
//! as `payment_intent_unexpected_state` is looked up, never created again;
//! 429, `processing` and an unconfirmed PaymentIntent read as they should.

use super::*;

#[tokio::test]
async fn the_create_sends_the_key_the_version_and_no_confirm() {
    let c = call(None, false);
    let f = Fake::start(vec![(
        200,
        intent("pi_1", "requires_confirmation", &c.key.to_string()),
        None,
    )])
    .await;
    let got = f.gw.prepare(&c).await;
    assert!(
        matches!(&got, Prepared::Created { gateway_ref, .. } if gateway_ref == "pi_1"),
        "{got:?}"
    );
    let seen = f.seen();
    let s = &seen[0];
    assert_eq!(
        (s.method.as_str(), s.uri.as_str()),
        ("POST", "/v1/payment_intents")
    );
    assert_eq!(s.headers["authorization"], "Bearer sk_test_scripted_0123");
    assert_eq!(s.headers["stripe-version"], STRIPE_VERSION);
    assert_eq!(s.headers["idempotency-key"], c.key.to_string().as_str());
    for part in [
        "amount=1999",
        "currency=eur",
        "confirm=false",
        "payment_method=pm_card_visa",
    ] {
        assert!(s.body.split('&').any(|p| p == part), "{part} in {}", s.body);
    }
    assert!(
        s.body
            .contains(&format!("metadata%5Bcobro_key%5D={}", c.key)),
        "{}",
        s.body
    );
}

#[tokio::test]
async fn a_create_refused_or_unanswered_never_charges_and_never_declines_on_a_guess() {
    let c = call(None, false);
    let idem = json!({"error": {"type": "idempotency_error", "message": "Keys for idempotent requests can only be used with the same parameters"}});
    let f = Fake::start(vec![
        (401, json!({"error": {"type": "invalid_request_error", "message": "Invalid API Key provided"}}), None),
        (400, idem, None),
        (500, json!({"error": {"type": "api_error"}}), None),
        (409, json!({"error": {"type": "invalid_request_error", "code": "idempotency_key_in_use"}}), None),
    ])
    .await;
    let auth = f.gw.prepare(&c).await;
    assert!(
        matches!(&auth, Prepared::Failed(ChargeOutcome::Deferred { why: Deferral::NotExecuted, evidence, .. }) if evidence.error_kind == "auth_failed"),
        "{auth:?}"
    );
    let idem = f.gw.prepare(&c).await;
    assert!(
        matches!(&idem, Prepared::Failed(ChargeOutcome::Refused { evidence }) if evidence.error_kind == "idempotency_error"),
        "{idem:?}"
    );
    let five = f.gw.prepare(&c).await;
    assert!(
        matches!(
            five,
            Prepared::Failed(ChargeOutcome::Deferred {
                why: Deferral::Unconfirmed,
                ..
            })
        ),
        "{five:?}"
    );
    // 409: our own earlier request with this key is still running; the
    // create is tried again later, with the same key.
    let busy = f.gw.prepare(&c).await;
    assert!(
        matches!(
            busy,
            Prepared::Failed(ChargeOutcome::Deferred {
                why: Deferral::Unconfirmed,
                ..
            })
        ),
        "{busy:?}"
    );
}

#[tokio::test]
async fn a_decline_keeps_every_code_and_advice_not_to_retry_is_final() {
    let c = call(Some("pi_9"), true);
    let err = json!({"error": {"type": "card_error", "code": "card_declined", "decline_code": "do_not_honor",
        "advice_code": "do_not_try_again", "network_advice_code": "03", "network_decline_code": "05",
        "payment_intent": {"id": "pi_9"}}});
    let f = Fake::start(vec![(402, err, None)]).await;
    let got = f.gw.charge(&c).await;
    let ChargeOutcome::Declined {
        code,
        charge_id,
        evidence,
    } = &got
    else {
        panic!("{got:?}");
    };
    assert_eq!(code, "do_not_honor/do_not_try_again");
    assert_eq!(charge_id.as_deref(), Some("pi_9"));
    let detail = evidence.detail.clone().unwrap_or_default();
    for part in [
        "network_advice_code=03",
        "network_decline_code=05",
        "advice_code=do_not_try_again",
    ] {
        assert!(detail.contains(part), "{detail}");
    }
    let seen = f.seen();
    assert_eq!(seen[0].uri, "/v1/payment_intents/pi_9/confirm");
    assert_eq!(
        seen[0].headers["idempotency-key"],
        format!("{}-confirm", c.key).as_str()
    );
    assert!(
        seen[0].body.contains("off_session=true"),
        "a business retry is merchant-initiated"
    );
}

#[tokio::test]
async fn a_confirm_refused_as_unexpected_state_is_looked_up_never_recreated() {
    let c = call(Some("pi_5"), false);
    let key = c.key.to_string();
    let unexpected = json!({"error": {"type": "invalid_request_error", "code": "payment_intent_unexpected_state"}});
    let f = Fake::start(vec![
        (400, unexpected.clone(), None),
        (200, intent("pi_5", "succeeded", &key), None),
        (400, unexpected, None),
        (200, intent("pi_5", "requires_confirmation", &key), None),
    ])
    .await;
    let got = f.gw.charge(&c).await;
    assert!(
        matches!(&got, ChargeOutcome::Approved { charge_id, .. } if charge_id == "pi_5"),
        "{got:?}"
    );
    // Still unconfirmed after a 400: the confirm itself is refused; finance.
    let refused = f.gw.charge(&c).await;
    assert!(
        matches!(refused, ChargeOutcome::Refused { .. }),
        "{refused:?}"
    );
    let paths: Vec<String> = f
        .seen()
        .iter()
        .map(|s| format!("{} {}", s.method, s.uri))
        .collect();
    assert_eq!(
        paths,
        [
            "POST /v1/payment_intents/pi_5/confirm",
            "GET /v1/payment_intents/pi_5",
            "POST /v1/payment_intents/pi_5/confirm",
            "GET /v1/payment_intents/pi_5",
        ],
        "no create"
    );
}

#[tokio::test]
async fn throttled_processing_and_not_confirmed_read_as_they_should() {
    let c = call(Some("pi_7"), false);
    let key = c.key.to_string();
    let f = Fake::start(vec![
        (
            429,
            json!({"error": {"type": "invalid_request_error", "code": "rate_limit"}}),
            Some("7"),
        ),
        (200, intent("pi_7", "processing", &key), None),
        (200, intent("pi_7", "processing", &key), None),
        (200, intent("pi_7", "requires_confirmation", &key), None),
        (
            404,
            json!({"error": {"type": "invalid_request_error", "code": "resource_missing"}}),
            None,
        ),
        (200, intent("pi_7", "succeeded", "another-key"), None),
    ])
    .await;
    let throttled = f.gw.charge(&c).await;
    assert!(
        matches!(throttled, ChargeOutcome::Deferred { why: Deferral::NotExecuted, retry_after: Some(d), .. } if d == Duration::from_secs(7)),
        "{throttled:?}"
    );
    assert!(
        matches!(f.gw.charge(&c).await, ChargeOutcome::Unknown { .. }),
        "processing is unknown"
    );
    let look = LookupCall {
        key: c.key,
        gateway_ref: Some("pi_7".into()),
        charge_id: None,
        since: None,
        last_sent: None,
        make_final: false,
    };
    assert!(
        matches!(f.gw.lookup(&look).await, LookupOutcome::Failed { .. }),
        "processing: check again"
    );
    assert!(
        matches!(f.gw.lookup(&look).await, LookupOutcome::NotFound { .. }),
        "unconfirmed: confirm it again"
    );
    assert!(
        matches!(f.gw.lookup(&look).await, LookupOutcome::Failed { .. }),
        "a 404 for our own PaymentIntent is no answer"
    );
    assert!(
        matches!(f.gw.lookup(&look).await, LookupOutcome::Failed { .. }),
        "a PaymentIntent carrying another key is never taken as ours"
    );
}
