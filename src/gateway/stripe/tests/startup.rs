//! What the Stripe adapter checks before its first charge: the probe takes
//! Stripe's own 404 as an answer and a 401 as a failure, the secret key
//! never shows in a `Debug`, and an empty key is refused at start-up.

use super::*;

#[tokio::test]
async fn the_probe_takes_stripes_own_404_as_an_answer_and_a_401_as_a_failure() {
    let f = Fake::start(vec![
        (
            404,
            json!({"error": {"type": "invalid_request_error", "code": "resource_missing"}}),
            None,
        ),
        (
            401,
            json!({"error": {"type": "invalid_request_error"}}),
            None,
        ),
    ])
    .await;
    assert!(matches!(f.gw.probe().await, LookupOutcome::NotFound { .. }));
    let bad = f.gw.probe().await;
    assert!(
        matches!(&bad, LookupOutcome::Deferred { evidence, .. } if evidence.error_kind == "auth_failed"),
        "{bad:?}"
    );
    assert!(
        f.seen()[0]
            .uri
            .starts_with("/v1/payment_intents/pi_cobroprobe")
    );
}

/// A configuration for Stripe's own API base with `secret_key` (these
/// tests send nothing).
fn config(secret_key: SecretKey) -> StripeConfig {
    StripeConfig {
        api_base: DEFAULT_API_BASE.into(),
        secret_key,
        connect_timeout: Duration::from_secs(1),
        request_timeout: Duration::from_secs(1),
        ca_file: None,
        off_session_retries: true,
        created_filter: true,
        find: FindConfig::default(),
    }
}

#[test]
fn the_secret_key_never_shows() {
    let key = SecretKey::new("sk_test_51Habcdefghijklmnop");
    let shown = format!("{key:?}");
    assert!(!shown.contains("51Habc"), "{shown}");
    assert!(shown.starts_with("sk_test"), "{shown}");
    let cfg = config(key);
    assert!(!format!("{cfg:?}").contains("51Habc"));
}

#[test]
fn an_empty_key_is_refused_at_start_up() {
    let cfg = config(SecretKey::new("  "));
    let err = StripeGateway::new(cfg).err().map(|e| e.to_string());
    assert!(err.is_some_and(|e| e.contains("STRIPE_SECRET_KEY")));
}
