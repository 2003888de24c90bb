//! localstripe for tests: started on a free loopback port through
//! `scripts/localstripe/serve` (installed with `pip install localstripe`),
//! killed on drop, and read through its own Stripe API; and the charges
//! it approves.

#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cobro::domain::ChargeRequest;
use cobro::gateway::{GatewayChoice, GatewayKind};
use cobro::runtime::WorkerArgs;
use cobro::state::State;
use cobro::store::{Attempt, Store};
use serde_json::Value;

use super::common::settled;

/// The secret key tests use: localstripe accepts any `sk_…`.
pub const TEST_KEY: &str = "sk_test_cobro_local";
/// localstripe's test card that is declined when charged.
pub const DECLINED_CARD: &str = "pm_card_chargeCustomerFail";

pub struct LocalStripe {
    pub url: String,
    child: Child,
}

impl Drop for LocalStripe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One PaymentIntent as localstripe lists it.
#[derive(Debug, Clone)]
pub struct Intent {
    pub id: String,
    pub status: String,
    pub amount: i64,
    pub currency: String,
    pub key: Option<String>,
    pub order: Option<String>,
    /// The Customer it charged (`cus_…`), if any.
    pub customer: Option<String>,
}

/// Whether localstripe can run (from the system's python3, or installed
/// into `target/pyenv` on first use). Without it the test is skipped and
/// recorded, unless `CI` is set: then it fails.
pub fn localstripe_installed() -> bool {
    super::common::python::python_with("localstripe").is_some()
}

/// localstripe for this test; `None` when it cannot run (the test is
/// skipped, see [`localstripe_installed`]).
pub async fn local_stripe() -> Option<LocalStripe> {
    if !localstripe_installed() {
        return None;
    }
    Some(LocalStripe::start().await)
}

/// A charge of `amount` EUR minor units for `order` on `pm_card_visa`,
/// the test card localstripe approves.
pub fn visa_charge(order: &str, amount: i64) -> ChargeRequest {
    ChargeRequest::parse(order, amount, "EUR", None, Some("pm_card_visa")).unwrap()
}

/// Enqueues `req` and waits (up to 30 s) for a worker to charge it.
pub async fn charged_by_worker(store: &Store, req: &ChargeRequest) -> Attempt {
    let id = store.enqueue(req).await.unwrap().attempt_id;
    settled(store, id, State::Aprobado, Duration::from_secs(30)).await
}

impl LocalStripe {
    pub async fn start() -> Self {
        let port = super::common::free_port();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/localstripe/serve");
        let python = super::common::python::python_with("localstripe")
            .expect("localstripe_installed() before LocalStripe::start()");
        let child = Command::new(python)
            .arg(script)
            .arg(port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 scripts/localstripe/serve (pip install localstripe)");
        let url = format!("http://127.0.0.1:{port}");
        let mut me = Self { url, child };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = me.child.try_wait() {
                panic!(
                    "localstripe exited at start-up ({status}); is it installed? pip install localstripe"
                );
            }
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return me;
            }
            assert!(
                Instant::now() < deadline,
                "localstripe did not listen on {port} in 30 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn client() -> reqwest::Client {
        reqwest::Client::new()
    }

    async fn get(&self, path: &str, query: &[(&str, String)]) -> Value {
        let r = Self::client()
            .get(format!("{}{path}", self.url))
            .bearer_auth(TEST_KEY)
            .query(query)
            .send()
            .await
            .expect("localstripe answers");
        assert!(r.status().is_success(), "GET {path}: {}", r.status());
        r.json().await.expect("json")
    }

    async fn post(&self, path: &str, form: &[(String, String)]) -> Value {
        let r = Self::client()
            .post(format!("{}{path}", self.url))
            .bearer_auth(TEST_KEY)
            .form(form)
            .send()
            .await
            .expect("localstripe answers");
        assert!(r.status().is_success(), "POST {path}: {}", r.status());
        r.json().await.expect("json")
    }

    /// Every object of a list endpoint, all pages.
    pub async fn list(&self, path: &str) -> Vec<Value> {
        let mut out = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let mut q = vec![("limit", "100".to_owned())];
            if let Some(a) = &after {
                q.push(("starting_after", a.clone()));
            }
            let page = self.get(path, &q).await;
            let data = page["data"].as_array().cloned().unwrap_or_default();
            after = data
                .last()
                .and_then(|o| o["id"].as_str())
                .map(str::to_owned);
            out.extend(data);
            if !page["has_more"].as_bool().unwrap_or(false) {
                return out;
            }
        }
    }

    /// Every PaymentIntent localstripe holds.
    pub async fn intents(&self) -> Vec<Intent> {
        self.list("/v1/payment_intents")
            .await
            .into_iter()
            .map(|o| Intent {
                id: o["id"].as_str().unwrap_or_default().to_owned(),
                status: o["status"].as_str().unwrap_or_default().to_owned(),
                amount: o["amount"].as_i64().unwrap_or_default(),
                currency: o["currency"].as_str().unwrap_or_default().to_owned(),
                key: o["metadata"]["cobro_key"].as_str().map(str::to_owned),
                order: o["metadata"]["cobro_order"].as_str().map(str::to_owned),
                customer: o["customer"].as_str().map(str::to_owned),
            })
            .collect()
    }

    /// Every refund localstripe holds: (id, PaymentIntent, amount, cobro key).
    pub async fn refunds(&self) -> Vec<(String, Option<String>, i64, Option<String>)> {
        self.list("/v1/refunds")
            .await
            .into_iter()
            .map(|o| {
                (
                    o["id"].as_str().unwrap_or_default().to_owned(),
                    o["payment_intent"].as_str().map(str::to_owned),
                    o["amount"].as_i64().unwrap_or_default(),
                    o["metadata"]["cobro_key"].as_str().map(str::to_owned),
                )
            })
            .collect()
    }

    /// Sends every event of the listed types to `url`, signed with `secret`.
    pub async fn register_webhook(&self, url: &str, secret: &str) {
        let r = Self::client()
            .post(format!("{}/_config/webhooks/cobro", self.url))
            .form(&[("url", url), ("secret", secret)])
            .send()
            .await
            .expect("localstripe answers");
        assert!(
            r.status().is_success(),
            "webhook registration: {}",
            r.status()
        );
    }

    /// A PaymentIntent for `req`, unconfirmed, as cobro's adapter makes it.
    pub async fn create_intent(&self, req: &ChargeRequest, attempt: &str) -> String {
        let form = vec![
            ("amount".into(), req.amount.minor().to_string()),
            ("currency".into(), req.currency.code().to_ascii_lowercase()),
            (
                "payment_method".into(),
                req.payment_method
                    .as_ref()
                    .map(|p| p.token().to_owned())
                    .unwrap_or_default(),
            ),
            ("confirm".into(), "false".into()),
            ("metadata[cobro_key]".into(), req.key.to_string()),
            (
                "metadata[cobro_order]".into(),
                req.order_id.as_str().to_owned(),
            ),
            ("metadata[cobro_attempt]".into(), attempt.to_owned()),
        ];
        let pi = self.post("/v1/payment_intents", &form).await;
        pi["id"].as_str().expect("an id").to_owned()
    }

    /// A card PaymentMethod with this test number, made at the fake server
    /// as Stripe.js would in the customer's browser.
    pub async fn payment_method(&self, number: &str) -> String {
        let form: Vec<(String, String)> = [
            ("type", "card"),
            ("card[number]", number),
            ("card[exp_month]", "12"),
            ("card[exp_year]", "2030"),
            ("card[cvc]", "123"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let pm = self.post("/v1/payment_methods", &form).await;
        pm["id"].as_str().expect("an id").to_owned()
    }

    /// One object as localstripe holds it (`/v1/payment_intents/pi_…`).
    pub async fn object(&self, path: &str) -> Value {
        self.get(path, &[]).await
    }

    /// A Customer with a card of this test number attached to it, as an
    /// app saves a card: `(cus_…, pm_…)`.
    pub async fn customer_with_card(&self, number: &str) -> (String, String) {
        let cus = self.post("/v1/customers", &[]).await;
        let cus = cus["id"].as_str().expect("a customer id").to_owned();
        let pm = self.payment_method(number).await;
        self.attach(&pm, &cus).await;
        (cus, pm)
    }

    /// Saves a PaymentMethod to a Customer (`/v1/payment_methods/…/attach`).
    pub async fn attach(&self, pm: &str, customer: &str) {
        let form = [("customer".to_owned(), customer.to_owned())];
        self.post(&format!("/v1/payment_methods/{pm}/attach"), &form)
            .await;
    }

    pub async fn confirm(&self, pi: &str) -> Value {
        self.post(&format!("/v1/payment_intents/{pi}/confirm"), &[])
            .await
    }

    /// The latest event of `kind`, as localstripe keeps it.
    pub async fn event(&self, kind: &str) -> Value {
        let events = self.get("/v1/events", &[("type", kind.to_owned())]).await;
        events["data"][0].clone()
    }
}

/// Worker settings for Stripe's API at `api_base` (localstripe, or the
/// lossy proxy in front of it): no `created` filter and no `off_session`,
/// which localstripe does not take.
pub fn stripe_worker_args(db_url: &str, api_base: &str) -> WorkerArgs {
    let mut args = super::common::worker_args(db_url, "http://127.0.0.1:9");
    args.gateway = GatewayChoice {
        kind: Some(GatewayKind::Stripe),
        stripe_secret_key: Some(TEST_KEY.into()),
        stripe_api_base: api_base.into(),
        stripe_off_session_retries: false,
        stripe_created_filter: false,
        ..GatewayChoice::default()
    };
    args
}
