//! Interoperability with an independent signer: the official Standard
//! Webhooks library for Python (`pip install standardwebhooks`) signs, our
//! receiver accepts over HTTP; we sign, it verifies. Without Python or the
//! package the test says SKIPPED, unless `CI` is set: then it fails.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use cobro::domain::ChargeRequest;
use cobro::state::State;
use cobro::webhook::{Scheme, Verifier};
use common::python;
use common::*;
use serde_json::{Value, json};

const PY_SIGN: &str = r#"
import sys, json, datetime
from standardwebhooks.webhooks import Webhook
secret, msg_id, ts = sys.argv[1], sys.argv[2], int(sys.argv[3])
body = sys.stdin.read()
sig = Webhook(secret).sign(msg_id, datetime.datetime.fromtimestamp(ts, tz=datetime.timezone.utc), body)
print(sig)
"#;

const PY_VERIFY: &str = r#"
import sys, json
from standardwebhooks.webhooks import Webhook
secret, headers = sys.argv[1], json.loads(sys.argv[2])
body = sys.stdin.read()
Webhook(secret).verify(body, headers)
print("verified")
"#;

fn python(script: &str, args: &[&str], stdin: &str) -> Option<std::process::Output> {
    let mut child = Command::new(py())
        .arg("-c")
        .arg(script)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    child.stdin.take()?.write_all(stdin.as_bytes()).ok()?;
    child.wait_with_output().ok()
}

fn python_library_available() -> bool {
    python::python_with("standardwebhooks").is_some()
}

/// The interpreter that imports `standardwebhooks` (after [`python_library_available`]).
fn py() -> std::path::PathBuf {
    python::python_with("standardwebhooks").expect("python_library_available() first")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_library_and_cobro_agree_on_signatures() {
    if !python_library_available() {
        return;
    }
    let db = TestDb::new(Backend::Sqlite).await;
    let secret = test_secret();
    let verifier = || Verifier::from_env_value(Scheme::StandardWebhooks, &secret).unwrap();
    let web = start_web(&db.store, verifier()).await;
    let req = ChargeRequest::parse("interop-1", 1_234, "USD", None, None).unwrap();
    let attempt = db.store.enqueue(&req).await.unwrap();
    let body = json!({
        "id": "evt_interop", "type": "charge.succeeded",
        "data": {"charge_id": "ch_py", "idempotency_key": attempt.idempotency_key}
    })
    .to_string();
    let now = chrono::Utc::now().timestamp().to_string();

    // Python signs; our receiver accepts over HTTP.
    let out = python(PY_SIGN, &[&secret, "evt_interop", &now], &body).expect("run python3");
    assert_success(&out);
    let signature = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert!(signature.starts_with("v1,"), "{signature}");
    let resp = reqwest::Client::new()
        .post(format!("{}/webhooks/gateway", web.url))
        .header("content-type", "application/json")
        .header("webhook-id", "evt_interop")
        .header("webhook-timestamp", &now)
        .header("webhook-signature", &signature)
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let reply: Value = resp.json().await.unwrap();
    assert_eq!(reply["outcome"]["result"], "applied");
    assert_eq!(
        db.store.load(attempt.attempt_id).await.unwrap().0.state,
        State::Aprobado
    );

    // Python also rejects what it should: a tampered body fails its check of our signature...
    let headers: serde_json::Map<String, Value> = verifier()
        .sign("evt_rust", chrono::Utc::now().timestamp(), body.as_bytes())
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    let headers = Value::Object(headers).to_string();
    let tampered = body.replace("ch_py", "ch_px");
    let out = python(PY_VERIFY, &[&secret, &headers], &tampered).unwrap();
    assert!(!out.status.success(), "python accepted a tampered body");
    // ...and accepts our signature on the real body.
    let out = python(PY_VERIFY, &[&secret, &headers], &body).unwrap();
    assert_success(&out);
    web.stop().await;
    db.drop_db().await;
}
