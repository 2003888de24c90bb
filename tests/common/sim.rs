//! The gateway simulator as a real HTTP server on 127.0.0.1, the faults a
//! test sets most, and what a test asks it over HTTP: its ledger, new
//! faults, the approved charges per order.

use std::collections::HashMap;
use std::time::Duration;

use cobro::gateway::{HttpGateway, HttpGatewayConfig};
use cobro::sim::{Faults, Injection, Ledger, LedgerEntry, SimConfig, SimHandle};

pub async fn start_sim(idempotent: bool, faults: Faults) -> SimHandle {
    spawn_sim(SimConfig {
        per_order_draws: false,
        webhooks: None,
        idempotent,
        seed: 7,
        faults,
    })
    .await
}

/// The simulator (honouring keys) that also delivers its outcomes to
/// `web`'s `/webhooks/gateway`, signed by `signer`: each event `copies`
/// times, up to `jitter_ms` apart.
pub async fn sim_with_webhooks(
    web: &super::Web,
    signer: cobro::webhook::Verifier,
    faults: Faults,
    copies: u32,
    jitter_ms: u64,
) -> SimHandle {
    spawn_sim(SimConfig {
        idempotent: true,
        seed: 3,
        faults,
        per_order_draws: false,
        webhooks: Some(cobro::sim::WebhookTarget {
            url: format!("{}/webhooks/gateway", web.url),
            signer,
            copies,
            delay_ms: 0,
            jitter_ms,
        }),
    })
    .await
}

async fn spawn_sim(cfg: SimConfig) -> SimHandle {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind sim");
    cobro::sim::spawn(listener, cfg)
        .await
        .expect("start gateway simulator")
}

/// A stand-in gateway (plain axum: the test writes its answers) on
/// 127.0.0.1:0, serving until the test ends: its base URL.
pub async fn stand_in(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a stand-in gateway");
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

pub async fn ledger(sim_url: &str) -> Ledger {
    reqwest::get(format!("{sim_url}/ledger"))
        .await
        .expect("GET /ledger")
        .json()
        .await
        .expect("ledger json")
}

pub async fn set_faults(sim_url: &str, faults: &Faults) {
    let resp = reqwest::Client::new()
        .put(format!("{sim_url}/control/faults"))
        .json(faults)
        .send()
        .await
        .expect("PUT /control/faults");
    assert!(
        resp.status().is_success(),
        "PUT /control/faults: {}",
        resp.status()
    );
}

/// Every call executed at the gateway and its answer lost; lookups answer.
pub fn answers_lost() -> Faults {
    Faults {
        p_response_lost: 1.0,
        ..Faults::default()
    }
}

/// Every lookup failing (503); charges and refunds answer.
pub fn lookups_fail() -> Faults {
    Faults {
        p_lookup_fail: 1.0,
        ..Faults::default()
    }
}

/// Every call executed and its answer lost, and every lookup failing:
/// nothing says what happened.
pub fn answers_lost_lookups_fail() -> Faults {
    Faults {
        p_response_lost: 1.0,
        ..lookups_fail()
    }
}

/// Every charge or refund request held 2.5 s (longer than the worker's
/// 1.5 s timeout), then dropped, never executed.
pub fn requests_lost() -> Faults {
    Faults {
        p_request_lost: 1.0,
        hold_ms: 2_500,
        ..Faults::default()
    }
}

/// The gateway down: every charge, refund and lookup answers 503.
pub fn outage() -> Faults {
    Faults {
        outage: true,
        ..Faults::default()
    }
}

/// Every charge declined with `code`.
pub fn declining(code: &str) -> Faults {
    Faults {
        p_decline: 1.0,
        decline_codes: vec![code.into()],
        ..Faults::default()
    }
}

/// Approved charges per order in the gateway's ledger.
pub fn approved_per_order(ledger: &Ledger) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for e in ledger.entries.iter().filter(|e| e.status == "approved") {
        *m.entry(e.order_id.clone()).or_insert(0) += 1;
    }
    m
}

/// cobro's HTTP client of the simulator at `sim_url`, with the test
/// timeouts (500 ms to connect, 1.5 s for an answer).
pub fn sim_gateway(sim_url: &str) -> HttpGateway {
    HttpGateway::new(HttpGatewayConfig {
        base_url: sim_url.into(),
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_millis(1500),
        ca_file: None,
    })
    .expect("gateway client")
}

/// A charge the gateway made that cobro never asked for (another system,
/// a person at the gateway's dashboard), approved, in EUR.
pub async fn inject_charge(sim_url: &str, order: &str, amount_minor: i64) -> LedgerEntry {
    let inj = Injection {
        kind: "charge".into(),
        idempotency_key: None,
        order_id: order.into(),
        amount_minor,
        currency: "EUR".into(),
        decline_code: None,
        charge_id: None,
        at: None,
    };
    reqwest::Client::new()
        .post(format!("{sim_url}/control/inject"))
        .json(&inj)
        .send()
        .await
        .expect("POST /control/inject")
        .json()
        .await
        .expect("injected charge")
}
