//! End-to-end tests of the gateway simulator over real HTTP on 127.0.0.1:0, and the helpers
//! they share: [`Sim`] starts a simulator with a client and stops it; [`Api`] is a client's
//! calls to it (charges, refunds, lookups, the ledger, faults, any other GET or POST, a
//! charge or refund sent in the background); [`faults`] and [`config`] are the defaults with
//! a few fields set; [`expect_json`], [`assert_error`] and [`assert_bad_request`] check an
//! answer's status and body; [`decline_codes`] is one seeded run of 24 charges.
//!
//! Invariant: these tests only talk to the simulator through HTTP (reqwest or a raw TCP
//! socket), exactly like the worker does; nothing reaches into its state in-process. A
//! helper checks a status only where its name or arguments say so ([`Api::approved`]: 200,
//! [`expect_json`] and [`assert_error`]: the status given, [`assert_bad_request`]: 400,
//! [`Api::ledger`]: a success).

mod charges;
mod complete;
mod faults;
mod listing;
mod proxy;
mod refunds;
mod refuse;
mod throttle;

use std::{fmt::Display, net::SocketAddr, ops::Deref, time::Duration};

use reqwest::{Client, RequestBuilder, Response, StatusCode};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Value, json};
use tokio::{net::TcpListener, task::JoinHandle};
use uuid::Uuid;

use super::*;

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// A simulator serving on 127.0.0.1 and a client to it: its [`Api`] calls are `sim.charge(..)`
/// and the like; [`Sim::stop`] shuts it down.
struct Sim {
    handle: SimHandle,
    api: Api,
}

impl Sim {
    /// The default config (idempotent, seed 42, no faults) and a 5 s client.
    async fn start() -> TestResult<Self> {
        Self::with(SimConfig::default()).await
    }

    /// The default config with these initial faults, and a 5 s client.
    async fn faulty(faults: Faults) -> TestResult<Self> {
        Self::with(config(|c| c.faults = faults)).await
    }

    /// This config and a 5 s client.
    async fn with(cfg: SimConfig) -> TestResult<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        Self::around(spawn(listener, cfg).await?)
    }

    /// A 5 s client to a simulator already started (in proxy mode, say).
    fn around(handle: SimHandle) -> TestResult<Self> {
        let api = Api::new(&handle, Duration::from_secs(5))?;
        Ok(Self { handle, api })
    }

    /// The same simulator, its client replaced by one that gives up after `timeout`.
    fn timeout(self, timeout: Duration) -> TestResult<Self> {
        let api = Api::new(&self.handle, timeout)?;
        Ok(Self { api, ..self })
    }

    /// Another client to this simulator, with connections of its own.
    fn client(&self, timeout: Duration) -> TestResult<Api> {
        Api::new(&self.handle, timeout)
    }

    fn addr(&self) -> SocketAddr {
        self.handle.addr
    }

    /// Shuts the simulator down (see [`SimHandle::shutdown`]).
    async fn stop(self) -> TestResult {
        self.handle.shutdown().await;
        Ok(())
    }
}

impl Deref for Sim {
    type Target = Api;

    fn deref(&self) -> &Api {
        &self.api
    }
}

/// A reqwest client and the simulator's base URL: the calls a test makes.
#[derive(Clone)]
struct Api {
    c: Client,
    url: String,
}

impl Api {
    fn new(sim: &SimHandle, timeout: Duration) -> TestResult<Self> {
        let c = Client::builder().timeout(timeout).build()?;
        Ok(Self { c, url: sim.url() })
    }

    fn get(&self, path: &str) -> RequestBuilder {
        self.c.get(format!("{}{path}", self.url))
    }

    fn post(&self, path: &str) -> RequestBuilder {
        self.c.post(format!("{}{path}", self.url))
    }

    fn put(&self, path: &str) -> RequestBuilder {
        self.c.put(format!("{}{path}", self.url))
    }

    /// `POST /v1/charges` with this key and body (a [`ChargeBody`] or any JSON).
    async fn charge(&self, key: &str, b: &impl Serialize) -> reqwest::Result<Response> {
        let req = self.post("/v1/charges").header(IDEMPOTENCY_KEY_HEADER, key);
        req.json(b).send().await
    }

    /// `POST /v1/refunds` with this key and body (a [`RefundBody`] or any JSON).
    async fn refund(&self, key: &str, b: &impl Serialize) -> reqwest::Result<Response> {
        let req = self.post("/v1/refunds").header(IDEMPOTENCY_KEY_HEADER, key);
        req.json(b).send().await
    }

    async fn lookup(&self, key: &str) -> reqwest::Result<Response> {
        self.get(&format!("/v1/charges/{key}")).send().await
    }

    async fn lookup_refund(&self, key: &str) -> reqwest::Result<Response> {
        self.get(&format!("/v1/refunds/{key}")).send().await
    }

    /// Charges `amount_minor` EUR for `order_id` with a fresh key, asserts the 200 and
    /// returns the approval.
    async fn approved(&self, order_id: &str, amount_minor: i64) -> TestResult<ChargeResult> {
        let resp = self.charge(&key(), &body(order_id, amount_minor)).await?;
        expect_json(resp, StatusCode::OK).await
    }

    /// A charge sent in a background task.
    fn charge_later(&self, key: &str, b: ChargeBody) -> JoinHandle<reqwest::Result<Response>> {
        let (api, key) = (self.clone(), key.to_owned());
        tokio::spawn(async move { api.charge(&key, &b).await })
    }

    /// A refund sent in a background task.
    fn refund_later(&self, key: &str, b: RefundBody) -> JoinHandle<reqwest::Result<Response>> {
        let (api, key) = (self.clone(), key.to_owned());
        tokio::spawn(async move { api.refund(&key, &b).await })
    }

    /// `GET /ledger`; an error unless it succeeds.
    async fn ledger(&self) -> TestResult<Ledger> {
        let resp = self.get("/ledger").send().await?;
        Ok(resp.error_for_status()?.json().await?)
    }

    /// Polls `GET /ledger` until `done` holds, for at most 10 s (a generous bound: only a
    /// stalled simulator reaches it).
    async fn ledger_when(&self, done: impl Fn(&Ledger) -> bool) -> TestResult<Ledger> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let l = self.ledger().await?;
            if done(&l) {
                return Ok(l);
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!("ledger never reached the expected state: {l:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `PUT /control/faults`; the answer is the caller's to check.
    async fn put_faults(&self, f: &Faults) -> TestResult<Response> {
        Ok(self.put("/control/faults").json(f).send().await?)
    }
}

/// The default faults with `set` applied: `faults(|f| f.p_decline = 1.0)`.
fn faults(set: impl FnOnce(&mut Faults)) -> Faults {
    let mut f = Faults::default();
    set(&mut f);
    f
}

/// The default config with `set` applied: `config(|c| c.idempotent = false)`.
fn config(set: impl FnOnce(&mut SimConfig)) -> SimConfig {
    let mut cfg = SimConfig::default();
    set(&mut cfg);
    cfg
}

fn body(order_id: &str, amount_minor: i64) -> ChargeBody {
    ChargeBody {
        order_id: order_id.to_owned(),
        amount_minor,
        currency: "EUR".to_owned(),
        payment_method: Some("pm_card_visa".to_owned()),
    }
}

fn refund_body(charge_id: &str, order_id: &str, amount_minor: i64) -> RefundBody {
    RefundBody {
        charge_id: charge_id.to_owned(),
        order_id: order_id.to_owned(),
        amount_minor,
        currency: "EUR".to_owned(),
    }
}

/// A refund of `amount_minor` EUR of `charge`, for its order.
fn refund_of(charge: &ChargeResult, amount_minor: i64) -> RefundBody {
    refund_body(&charge.charge_id, &charge.order_id, amount_minor)
}

fn key() -> String {
    Uuid::new_v4().to_string()
}

/// Asserts that `resp` answered `status`, and decodes its JSON body.
async fn expect_json<T: DeserializeOwned>(resp: Response, status: StatusCode) -> TestResult<T> {
    assert_eq!(resp.status(), status);
    Ok(resp.json().await?)
}

/// Asserts that `resp` answered `status` with the body `{"error": error}`.
async fn assert_error(resp: Response, status: StatusCode, error: &str) -> TestResult {
    let body: Value = expect_json(resp, status).await?;
    assert_eq!(body, json!({ "error": error }));
    Ok(())
}

/// Asserts that `resp` is a 400 whose body names `field` (`what`: the request, for the
/// failure message); returns the body.
async fn assert_bad_request(resp: Response, field: &str, what: impl Display) -> TestResult<Value> {
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{what}");
    let err: Value = resp.json().await?;
    assert_eq!(err["field"], field, "{what}: {err}");
    Ok(err)
}

/// One seeded run: 24 charges (orders `o0`..`o23`, fresh keys, answers unread) on a
/// simulator with this seed and these faults; the decline code of each ledger entry, in
/// order.
async fn decline_codes(seed: u64, faults: Faults) -> TestResult<Vec<Option<String>>> {
    let sim = Sim::with(config(|c| {
        c.seed = seed;
        c.faults = faults;
    }))
    .await?;
    for i in 0..24 {
        sim.charge(&key(), &body(&format!("o{i}"), 100)).await?;
    }
    let entries = sim.ledger().await?.entries;
    sim.stop().await?;
    Ok(entries.into_iter().map(|e| e.decline_code).collect())
}

/// The client must see the connection close before any response: a request error, not a
/// status and not a timeout.
fn assert_dropped(result: reqwest::Result<Response>) {
    match result {
        Ok(resp) => panic!("expected a dropped connection, got HTTP {}", resp.status()),
        Err(e) => {
            assert!(
                !e.is_timeout(),
                "expected a closed connection, got a timeout: {e:?}"
            );
            assert!(e.status().is_none(), "unexpected status: {e:?}");
            assert!(e.is_request(), "expected a request error: {e:?}");
            let chain = format!("{e:?}");
            assert!(chain.contains("IncompleteMessage"), "{chain}");
        }
    }
}
