//! A 4xx is Stripe's word only when it carries Stripe's error object
//! (`{"error": {"type": …}}`, as Stripe and localstripe always send it). A
//! proxy's, a load balancer's or a firewall's 404, 408, 413 or 425, an
//! empty body or a page of HTML, says nothing about what Stripe did: a
//! create is made again (same key; an unconfirmed PaymentIntent moved no
//! money), a confirm or a refund is unknown and looked up, never declined
//! and never sent to finance on a guess. Stripe's own 4xx keeps its
//! meaning.

use super::*;

/// A proxy on 127.0.0.1 that answers every `POST` with `status` and `body`
/// (as it is, `text/html`), and passes each `GET` of a PaymentIntent to a
/// Stripe that says it is still unconfirmed.
async fn proxy(status: u16, body: &'static str) -> StripeGateway {
    let app = Router::new().fallback(move |method: Method| async move {
        match method {
            Method::POST => (
                StatusCode::from_u16(status).unwrap(),
                [(axum::http::header::CONTENT_TYPE, "text/html")],
                body,
            )
                .into_response(),
            _ => axum::Json(json!({"id": "pi_p", "object": "payment_intent",
                                   "status": "requires_confirmation"}))
            .into_response(),
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    scripted_gateway(url, FindConfig::default())
}

fn refund_call() -> RefundCall {
    RefundCall {
        key: IdempotencyKey::generate(),
        charge_id: "pi_p".into(),
        order_id: OrderId::parse("ord-1").unwrap(),
        amount: Amount::parse(100).unwrap(),
        currency: Currency::parse("EUR").unwrap(),
    }
}

fn not_stripes(e: &Evidence, status: u16) -> bool {
    e.error_kind == "http_4xx_unexpected"
        && e.http_status == Some(status)
        && e.detail
            .as_deref()
            .is_some_and(|d| d.contains("without Stripe's error object"))
}

#[tokio::test]
async fn a_4xx_without_stripes_error_object_is_never_a_decline() {
    for (status, body) in [
        (408, ""),
        (404, "<html><body>404 Not Found</body></html>"),
        (413, "<html>Request Entity Too Large</html>"),
        (425, ""),
        (402, ""),
        // JSON, but not Stripe's: its error has no `type`.
        (400, r#"{"error": {"message": "bad request"}}"#),
    ] {
        let gw = proxy(status, body).await;
        let created = gw.prepare(&call(None, false)).await;
        assert!(
            matches!(&created, Prepared::Failed(ChargeOutcome::Deferred { why: Deferral::Unconfirmed, evidence, .. })
                if not_stripes(evidence, status)),
            "{status}: created again later, never declined: {created:?}"
        );
        let confirmed = gw.charge(&call(Some("pi_p"), false)).await;
        assert!(
            matches!(&confirmed, ChargeOutcome::Unknown { evidence } if not_stripes(evidence, status)),
            "{status}: looked up on the schedule, never declined or refused: {confirmed:?}"
        );
        let refund = gw.refund(&refund_call()).await;
        assert!(
            matches!(&refund, ChargeOutcome::Unknown { evidence } if not_stripes(evidence, status)),
            "{status}: {refund:?}"
        );
    }
}

#[tokio::test]
async fn stripes_own_4xx_keeps_its_meaning() {
    let invalid = json!({"error": {"type": "invalid_request_error", "code": "amount_too_small",
        "param": "amount", "message": "Amount must be at least 50 cents"}});
    let card = json!({"error": {"type": "card_error", "code": "card_declined",
        "decline_code": "insufficient_funds"}});
    let refunded = json!({"error": {"type": "invalid_request_error",
        "code": "charge_already_refunded"}});
    let f = Fake::start(vec![
        (400, invalid, None),
        (402, card, None),
        (400, refunded, None),
        // A proxy's 404 to the breaker's probe is no "not found".
        (404, json!({"error": {"message": "Not Found"}}), None),
    ])
    .await;
    let created = f.gw.prepare(&call(None, false)).await;
    assert!(
        matches!(&created, Prepared::Failed(ChargeOutcome::Declined { code, .. }) if code == "amount_too_small"),
        "refused as a request: the PaymentIntent does not exist: {created:?}"
    );
    let declined = f.gw.charge(&call(Some("pi_c"), false)).await;
    assert!(
        matches!(&declined, ChargeOutcome::Declined { code, .. } if code == "insufficient_funds"),
        "{declined:?}"
    );
    let refund = f.gw.refund(&refund_call()).await;
    assert!(
        matches!(&refund, ChargeOutcome::Declined { code, .. } if code == "charge_already_refunded"),
        "{refund:?}"
    );
    let probe = f.gw.probe().await;
    assert!(matches!(&probe, LookupOutcome::Failed { .. }), "{probe:?}");
}
