//! An answer from Stripe too large to be a real one (an object past 1 MiB,
//! a list's page past 8 MiB) is never read: a create charged nothing (it
//! is made again, same key), a confirm or a refund is unknown (looked up,
//! never declined or sent again on a guess), a lookup failed, and a
//! listing fails whole. The server streams without a `Content-Length`.

use super::*;
use crate::gateway::tests::oversized::{Streamed, streaming};

const MIB: usize = 1 << 20;

/// Stripe's answers, each padded to `bytes`.
async fn padded(bytes: usize) -> StripeGateway {
    let url = streaming(move |method, path| {
        let body = match (method.as_str(), path) {
            ("POST", "/v1/refunds") => {
                json!({"id": "re_big", "object": "refund", "status": "succeeded", "payment_intent": "pi_big"})
            }
            // No key in its metadata: read, it would be recorded as created.
            ("POST", "/v1/payment_intents") => {
                json!({"id": "pi_big", "object": "payment_intent", "status": "requires_confirmation"})
            }
            ("GET", "/v1/payment_intents") => json!({"object": "list", "has_more": false,
                "data": [intent("pi_big", "succeeded", "k")]}),
            _ => intent("pi_big", "succeeded", "k"),
        };
        (200, Streamed::Json(body, bytes))
    })
    .await;
    scripted_gateway(url, FindConfig::default())
}

fn too_large(e: &Evidence) -> bool {
    e.error_kind == "answer_too_large"
        && e.http_status == Some(200)
        && e.detail.as_deref() == Some("an answer larger than 1 MiB")
}

#[tokio::test]
async fn an_answer_past_1_mib_is_never_read_and_never_settles_a_charge_or_refund() {
    let gw = padded(2 * MIB).await;
    let created = gw.prepare(&call(None, false)).await;
    assert!(
        matches!(&created, Prepared::Failed(ChargeOutcome::Deferred { why: Deferral::Unconfirmed, evidence, .. })
            if too_large(evidence)),
        "nothing recorded, created again later: {created:?}"
    );
    let c = call(Some("pi_big"), false);
    let confirmed = gw.charge(&c).await;
    assert!(
        matches!(&confirmed, ChargeOutcome::Unknown { evidence } if too_large(evidence)),
        "never an approval read from 2 MiB: {confirmed:?}"
    );
    let refund = gw
        .refund(&RefundCall {
            key: IdempotencyKey::generate(),
            charge_id: "pi_big".into(),
            order_id: OrderId::parse("ord-1").unwrap(),
            amount: Amount::parse(100).unwrap(),
            currency: Currency::parse("EUR").unwrap(),
        })
        .await;
    assert!(
        matches!(&refund, ChargeOutcome::Unknown { evidence } if too_large(evidence)),
        "{refund:?}"
    );
    let by_ref = LookupCall {
        gateway_ref: Some("pi_big".into()),
        ..LookupCall::by_key(c.key)
    };
    let found = gw.lookup(&by_ref).await;
    assert!(
        matches!(&found, LookupOutcome::Failed { evidence } if too_large(evidence)),
        "{found:?}"
    );
}

#[tokio::test]
async fn a_page_has_8_mib_and_one_past_it_fails_the_listing() {
    let from = chrono::DateTime::from_timestamp(1_764_547_000, 0).unwrap();
    let to = chrono::DateTime::from_timestamp(1_764_548_000, 0).unwrap();
    let listed = padded(2 * MIB)
        .await
        .list(Listed::Charges, from, to)
        .await
        .expect("a 2 MiB page is read");
    assert_eq!(listed.len(), 1);
    let err = padded(9 * MIB)
        .await
        .list(Listed::Charges, from, to)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "listing charges failed: a page larger than 8 MiB"
    );
}
