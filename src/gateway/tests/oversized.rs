//! An answer too large to be a real one is never read: a charge's or a
//! refund's past 1 MiB is unknown (the status line arrived, so the gateway
//! may have executed it), a lookup's failed, and a listing page past 8 MiB
//! fails the listing; an answer that never ends is cut there too, not left
//! to run until the request timeout. The server streams its bodies in
//! chunks without a `Content-Length`, so nothing but the reading can stop
//! them. [`streaming`] is shared with the Stripe adapter's tests.

use axum::http::{Method, StatusCode};
use chrono::{TimeDelta, Utc};
use serde_json::{Value, json};

use super::*;

/// A streamed answer: a JSON object with a `pad` field added to make its
/// body `bytes` long (about), or a body that never ends.
#[derive(Clone)]
pub(in crate::gateway) enum Streamed {
    Json(Value, usize),
    Endless,
}

/// A gateway on 127.0.0.1 whose answer to each request is `answer(method,
/// path)`, its body sent in 64 KiB chunks without a `Content-Length`.
pub(in crate::gateway) async fn streaming<F>(answer: F) -> String
where
    F: Fn(&Method, &str) -> (u16, Streamed) + Clone + Send + Sync + 'static,
{
    use futures::stream::{self, StreamExt};
    const CHUNK: usize = 64 << 10;
    let app = axum::Router::new().fallback(move |method: Method, uri: axum::http::Uri| {
        let (status, streamed) = answer(&method, uri.path());
        async move {
            let chunks: stream::BoxStream<'static, Result<Vec<u8>, std::io::Error>> = match streamed
            {
                Streamed::Json(value, bytes) => {
                    let mut text = value.to_string();
                    assert_eq!(text.pop(), Some('}'), "an object");
                    let pad = bytes.saturating_sub(text.len());
                    text.push_str(&format!(r#","pad":"{}"}}"#, "x".repeat(pad)));
                    let parts: Vec<Vec<u8>> =
                        text.as_bytes().chunks(CHUNK).map(<[u8]>::to_vec).collect();
                    stream::iter(parts.into_iter().map(Ok)).boxed()
                }
                Streamed::Endless => stream::repeat_with(|| Ok(vec![b' '; CHUNK])).boxed(),
            };
            (
                StatusCode::from_u16(status).unwrap(),
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                axum::body::Body::from_stream(chunks),
            )
        }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

const MIB: usize = 1 << 20;

/// Every answer is an approval `bytes` long: a refund's under
/// `/v1/refunds`, a charge's elsewhere, to a create or a lookup alike.
async fn approving(bytes: usize) -> TestResult<HttpGateway> {
    gateway_at(
        &streaming(move |_, path| {
            let body = match path.starts_with("/v1/refunds") {
                true => json!({"status": "approved", "refund_id": "re_big", "charge_id": "ch_big"}),
                false => json!({"status": "approved", "charge_id": "ch_big"}),
            };
            (200, Streamed::Json(body, bytes))
        })
        .await,
    )
}

fn too_large(e: &Evidence) -> bool {
    e.error_kind == "answer_too_large"
        && e.http_status == Some(200)
        && e.detail.as_deref() == Some("an answer larger than 1 MiB")
}

#[tokio::test]
async fn an_answer_past_1_mib_is_never_read_a_send_is_unknown_a_lookup_failed() -> TestResult {
    let gw = approving(2 * MIB).await?;
    let call = charge_call("order-big", 1000)?;
    for outcome in [
        gw.charge(&call).await,
        gw.refund(&refund_call("ch_big", "order-big", 1000)?).await,
    ] {
        assert!(
            matches!(&outcome, ChargeOutcome::Unknown { evidence } if too_large(evidence)),
            "never an approval read from 2 MiB: {outcome:?}"
        );
    }
    for found in [
        gw.lookup(&LookupCall::by_key(call.key)).await,
        gw.lookup_refund(&LookupCall::by_key(call.key)).await,
    ] {
        assert!(
            matches!(&found, LookupOutcome::Failed { evidence }
                if too_large(evidence) && evidence.lookup_result.as_deref() == Some("failed")),
            "{found:?}"
        );
    }
    // An answer under the cap is read as it always was.
    let gw = approving(MIB - 4096).await?;
    let outcome = gw.charge(&call).await;
    assert!(
        matches!(&outcome, ChargeOutcome::Approved { charge_id, .. } if charge_id == "ch_big"),
        "{outcome:?}"
    );
    Ok(())
}

#[tokio::test]
async fn an_answer_that_never_ends_is_cut_at_the_cap_not_at_the_timeout() -> TestResult {
    let gw = gateway_at(&streaming(|_, _| (200, Streamed::Endless)).await)?;
    let outcome = gw.charge(&charge_call("order-endless", 1000)?).await;
    assert!(
        matches!(&outcome, ChargeOutcome::Unknown { evidence } if too_large(evidence)),
        "{outcome:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_page_past_8_mib_fails_the_listing_and_the_settlement() -> TestResult {
    let (from, to) = (Utc::now() - TimeDelta::hours(1), Utc::now());
    let page = json!({"data": [], "has_more": false});
    let big = page.clone();
    let gw = gateway_at(&streaming(move |_, _| (200, Streamed::Json(big.clone(), 9 * MIB))).await)?;
    let err = gw.list(Listed::Charges, from, to).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "listing charges failed: a page larger than 8 MiB"
    );
    // A page has more room than one answer.
    let gw =
        gateway_at(&streaming(move |_, _| (200, Streamed::Json(page.clone(), 2 * MIB))).await)?;
    assert_eq!(gw.list(Listed::Refunds, from, to).await?, []);

    let endless = gateway_at(&streaming(|_, _| (200, Streamed::Endless)).await)?;
    let err = endless.list(Listed::Charges, from, to).await.unwrap_err();
    assert!(
        matches!(&err, ListError::BadPage { detail, .. } if detail == "a page larger than 8 MiB"),
        "{err:?}"
    );
    let err = endless.settlement(from, to).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "listing /v1/balance_transactions failed: a page larger than 8 MiB"
    );
    Ok(())
}
