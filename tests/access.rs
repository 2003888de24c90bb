//! Who may call which route of the web process, over real HTTP, on both
//! backends: every route × {no credential, a bad one, a key without the
//! scope, the right key} → 401 / 401 / 403 / 2xx, with nothing changed by a
//! refused request; the "agent" key of seed 003 (read scopes only) lists
//! the queue and gets the summary, and gets 403 on every write; the
//! webhook receiver, `/health` and `/openapi.json` need no credential; the
//! key's name is the actor in the log; a cross-site post (a browser's form:
//! `text/plain`, another `Origin`, its cached Basic sign-in) changes nothing.

#[macro_use]
mod common;

use cobro::domain::ChargeRequest;
use cobro::state::{Event, State};
use cobro::store::{Attempt, Store};
use cobro::webhook::{Scheme, Verifier};
use common::*;
use reqwest::{Method, RequestBuilder, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

on_both_backends!(
    every_route_needs_a_credential_with_its_scope,
    the_agent_reads_the_queue_and_the_summary_and_writes_nothing,
    a_cross_site_post_changes_nothing,
    only_the_webhook_receiver_and_health_are_open,
);

async fn web(db: &TestDb) -> Web {
    let v = Verifier::from_env_value(Scheme::StandardWebhooks, &test_secret()).unwrap();
    start_web(&db.store, v).await
}

/// A client like a browser after its first page: it carries one sign-in
/// cookie, to which the forms' tokens are bound.
fn client() -> reqwest::Client {
    let mut cookie = reqwest::header::HeaderMap::new();
    cookie.insert(
        reqwest::header::COOKIE,
        reqwest::header::HeaderValue::from_static("cobro_signin=0123456789abcdef0123456789abcdef"),
    );
    reqwest::Client::builder()
        .default_headers(cookie)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn pending(store: &Store, order: &str) -> Attempt {
    let req = ChargeRequest::parse(order, 1_000, "USD", None, Some("pm_test")).unwrap();
    let id = store.enqueue(&req).await.unwrap().attempt_id;
    store.load(id).await.unwrap().0
}

async fn approved(store: &Store, order: &str) -> Attempt {
    let a = pending(store, order).await;
    let a = step(store, &a, Event::Claim, None).await;
    step(store, &a, Event::Approved, Some("ch_access")).await
}

async fn declined(store: &Store, order: &str) -> Attempt {
    let a = pending(store, order).await;
    let a = step(store, &a, Event::Claim, None).await;
    step(store, &a, Event::Declined, Some("insufficient_funds")).await
}

/// Declined, with a business retry scheduled a day later.
async fn retry_pending(store: &Store, order: &str) -> Attempt {
    use cobro::store::{Applied, Change};
    let a = pending(store, order).await;
    let a = step(store, &a, Event::Claim, None).await;
    let mut decline = Change::new(Some(Event::Declined), "test", "worker:test");
    decline.decline_code = Some("insufficient_funds");
    decline.act_in = Some(std::time::Duration::from_secs(86_400));
    match store.apply(&a, &decline).await.unwrap() {
        Applied::Moved(a) => *a,
        Applied::Lost => panic!("lost a race nobody runs"),
    }
}

async fn in_review(store: &Store, order: &str) -> Attempt {
    let a = pending(store, order).await;
    let a = step(store, &a, Event::Claim, None).await;
    let a = step(store, &a, Event::Unknown, None).await;
    step(store, &a, Event::ChecksExhausted, None).await
}

async fn open_case(db: &TestDb, gateway_ref: &str) -> i64 {
    let dedupe = format!("unmatched_charge:{gateway_ref}");
    db.exec(
        "INSERT INTO cobro.recon_cases (kind, dedupe_key, order_id, gateway_ref, details, window_from, window_to)
         VALUES ('unmatched_charge', $1, 'order-x', $2, '{}', now() - interval '1 day', now())",
        "INSERT INTO recon_cases (kind, dedupe_key, order_id, gateway_ref, details, window_from, window_to, opened_at)
         VALUES ('unmatched_charge', ?1, 'order-x', ?2, '{}', 0, 1, 2)",
        &[&dedupe, gateway_ref],
    )
    .await
    .unwrap();
    let cases = db.store.open_cases().await.unwrap();
    cases
        .iter()
        .find(|c| c.gateway_ref.as_deref() == Some(gateway_ref))
        .unwrap()
        .id
}

/// A `double_charge` case for `order`: its approved charge `ch_access`
/// and two duplicates, `ch_dup_api` and `ch_dup_form`.
async fn double_charge_case(db: &TestDb, order: &str) -> i64 {
    let record = |id: &str| {
        json!({"kind": "charges", "id": id, "idempotency_key": "k", "order_id": order,
               "amount_minor": 1000, "currency": "USD", "status": "approved",
               "at": "2026-12-01T00:00:00Z"})
    };
    let details =
        json!({"gateway": [record("ch_access"), record("ch_dup_api"), record("ch_dup_form")]})
            .to_string();
    db.exec(
        "INSERT INTO cobro.recon_cases (kind, dedupe_key, order_id, gateway_ref, details, window_from, window_to)
         VALUES ('double_charge', 'double_charge:access', $1, 'ch_access,ch_dup_api,ch_dup_form',
                 $2::jsonb, now() - interval '1 day', now())",
        "INSERT INTO recon_cases (kind, dedupe_key, order_id, gateway_ref, details, window_from, window_to, opened_at)
         VALUES ('double_charge', 'double_charge:access', ?1, 'ch_access,ch_dup_api,ch_dup_form', ?2, 0, 1, 2)",
        &[order, &details],
    )
    .await
    .unwrap();
    let cases = db.store.open_cases().await.unwrap();
    cases.iter().find(|c| c.kind == "double_charge").unwrap().id
}

/// How a request presents itself.
#[derive(Clone, Copy, Debug)]
enum Cred<'a> {
    None,
    Bearer(&'a str),
    Basic(&'a str),
    /// A well-formed credential nobody configured.
    Forged,
}

fn with(req: RequestBuilder, cred: Cred, basic: bool) -> RequestBuilder {
    match (cred, basic) {
        (Cred::None, _) => req,
        (Cred::Bearer(name), _) => req.bearer_auth(secret(name)),
        (Cred::Basic(name), _) => req.basic_auth(name, Some(secret(name))),
        (Cred::Forged, true) => req.basic_auth("ana", Some("not-the-secret-0123456789")),
        (Cred::Forged, false) => req.bearer_auth("cobro_sk_not-a-configured-key"),
    }
}

/// One guarded route: how to call it, its scope's holder and a key without
/// that scope, and whether it is a browser form (Basic sign-in).
struct Route {
    method: Method,
    path: String,
    body: Body,
    /// A key that holds the route's scope.
    holder: &'static str,
    /// A valid key without the route's scope.
    outsider: &'static str,
    /// A person's browser signs in with Basic: the finance pages and forms.
    basic: bool,
}

#[derive(Clone)]
enum Body {
    None,
    Json(Value, Option<String>),
    Form(Vec<(&'static str, String)>),
}

impl Route {
    fn request(&self, http: &reqwest::Client, base: &str, cred: Cred) -> RequestBuilder {
        let mut req = http.request(self.method.clone(), format!("{base}{}", self.path));
        req = match &self.body {
            Body::None => req,
            Body::Json(v, key) => {
                let req = req.json(v);
                match key {
                    Some(k) => req.header("Idempotency-Key", k),
                    None => req,
                }
            }
            Body::Form(fields) => req.form(fields),
        };
        with(req, cred, self.basic)
    }

    /// A finance page's form: answered with a redirect back to the queue.
    fn is_form(&self) -> bool {
        self.basic && self.method == Method::POST
    }

    fn name(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

/// What a refused request must leave as it was: every attempt's version
/// and state, the number of attempts and transition rows, the open cases.
async fn snapshot(db: &TestDb) -> (i64, i64, usize) {
    (
        db.attempts().await,
        db.store.transition_rows().await.unwrap(),
        db.store.open_cases().await.unwrap().len(),
    )
}

/// The form token the finance page gives `name` (read from the page).
async fn form_token(http: &reqwest::Client, base: &str, name: &str, attempt: Uuid) -> String {
    let page = http
        .get(format!("{base}/finance/attempts/{attempt}"))
        .basic_auth(name, Some(secret(name)))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let at = page.find("name=\"form_token\" value=\"").expect("a form") + 25;
    let len = page[at..].find('"').expect("the value's end");
    page[at..at + len].to_owned()
}

async fn every_route_needs_a_credential_with_its_scope(b: Backend) {
    let db = TestDb::new(b).await;
    let web = web(&db).await;
    let http = client();
    let charge = approved(&db.store, "acc-approved").await;
    let review_form = in_review(&db.store, "acc-review-form").await;
    let review_api = in_review(&db.store, "acc-review-api").await;
    let rejected = declined(&db.store, "acc-declined").await;
    retry_pending(&db.store, "acc-new-card").await;
    let case_form = open_case(&db, "ch_form").await;
    let case_api = open_case(&db, "ch_api").await;
    let doubled = double_charge_case(&db, &charge.order_id).await;
    let token = form_token(&http, &web.url, "ana", review_form.id).await;

    let get = |path: String, holder, outsider, basic| Route {
        method: Method::GET,
        path,
        body: Body::None,
        holder,
        outsider,
        basic,
    };
    let post_json = |path: String, body: Value, key: Option<String>, holder, outsider| Route {
        method: Method::POST,
        path,
        body: Body::Json(body, key),
        holder,
        outsider,
        basic: false,
    };
    let post_form = |path: String, fields: Vec<(&'static str, String)>| Route {
        method: Method::POST,
        path,
        body: Body::Form(fields),
        holder: "ana",
        outsider: "agent",
        basic: true,
    };
    let routes = vec![
        post_json(
            "/charges".into(),
            json!({"order_id": "acc-new", "amount_minor": 500, "currency": "EUR"}),
            Some(Uuid::new_v4().to_string()),
            "app",
            "agent",
        ),
        get(format!("/charges/{}", charge.id), "app", "prom", false),
        post_json(
            "/refunds".into(),
            json!({"attempt_id": charge.id, "amount_minor": 100}),
            Some(Uuid::new_v4().to_string()),
            "app",
            "ana",
        ),
        get(format!("/refunds/{}", charge.id), "agent", "ana", false),
        get("/attempts?state=APROBADO".into(), "agent", "ana", false),
        get(format!("/attempts/{}", charge.id), "app", "prom", false),
        get("/operator/attempts".into(), "agent", "ana", true),
        get(
            format!("/operator/attempts/{}", charge.id),
            "app",
            "luis",
            true,
        ),
        post_json(
            "/orders/acc-new-card/payment-method".into(),
            json!({"payment_method": "pm_card_new"}),
            None,
            "app",
            "agent",
        ),
        get("/metrics".into(), "prom", "app", false),
        get("/finance".into(), "ana", "app", true),
        get(
            format!("/finance/attempts/{}", review_form.id),
            "ana",
            "prom",
            true,
        ),
        get("/finance/summary".into(), "ana", "app", true),
        get("/finance/escalations.csv".into(), "ana", "app", true),
        get("/finance/settlements.csv".into(), "ana", "app", true),
        post_form(
            format!("/finance/attempts/{}/resolve", review_form.id),
            vec![
                ("action", "approve".into()),
                ("version", review_form.version.to_string()),
                ("form_token", token.clone()),
                ("note", "captured in the dashboard".into()),
                ("charge_id", "ch_form".into()),
            ],
        ),
        post_form(
            format!("/finance/cases/{case_form}/resolve"),
            vec![("form_token", token.clone()), ("note", "refunded".into())],
        ),
        post_form(
            format!("/finance/cases/{doubled}/refund-duplicate"),
            vec![
                ("form_token", token.clone()),
                ("charge_id", "ch_dup_form".into()),
            ],
        ),
        get("/finance/api/escalations".into(), "ana", "app", false),
        get(
            format!("/finance/api/attempts/{}", review_api.id),
            "agent",
            "app",
            false,
        ),
        get("/finance/api/summary".into(), "agent", "prom", false),
        post_json(
            format!("/finance/api/attempts/{}/resolve", review_api.id),
            json!({"action": "decline", "code": "finance_declined", "version": review_api.version,
                   "note": "no charge at the gateway"}),
            None,
            "ana",
            "agent",
        ),
        post_json(
            format!("/finance/api/attempts/{}/retry", rejected.id),
            json!({}),
            None,
            "luis",
            "app",
        ),
        post_json(
            format!("/finance/api/cases/{case_api}/resolve"),
            json!({"note": "checked"}),
            None,
            "luis",
            "agent",
        ),
        post_json(
            format!("/finance/api/cases/{doubled}/refund-duplicate"),
            json!({"charge_id": "ch_dup_api"}),
            None,
            "luis",
            "agent",
        ),
    ];
    for route in &routes {
        let before = snapshot(&db).await;
        for cred in [Cred::None, Cred::Forged] {
            let resp = route.request(&http, &web.url, cred).send().await.unwrap();
            assert_eq!(resp.status(), 401, "{} with {cred:?}", route.name());
            let challenge = resp.headers()["www-authenticate"].to_str().unwrap();
            // A browser's page asks for the sign-in; an API for a key.
            let page = (route.path.starts_with("/finance")
                && !route.path.starts_with("/finance/api"))
                || route.path.starts_with("/operator");
            let want = if page { "Basic" } else { "Bearer" };
            assert!(challenge.starts_with(want), "{}: {challenge}", route.name());
        }
        let outsider = if route.basic {
            Cred::Basic(route.outsider)
        } else {
            Cred::Bearer(route.outsider)
        };
        let resp = route
            .request(&http, &web.url, outsider)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 403, "{} with {outsider:?}", route.name());
        assert_eq!(
            snapshot(&db).await,
            before,
            "{}: refused, nothing changed",
            route.name()
        );

        let holder = if route.basic {
            Cred::Basic(route.holder)
        } else {
            Cred::Bearer(route.holder)
        };
        let resp = route.request(&http, &web.url, holder).send().await.unwrap();
        let status = resp.status();
        assert_eq!(
            resp.headers()
                .get("cache-control")
                .map(|v| v.to_str().unwrap()),
            Some("no-store"),
            "{}",
            route.name()
        );
        let ok = if route.is_form() {
            status == StatusCode::SEE_OTHER
        } else {
            status.is_success()
        };
        assert!(
            ok,
            "{} with {holder:?}: {status} {}",
            route.name(),
            resp.text().await.unwrap()
        );
    }

    // What each write did, as whom: the key's name is the actor.
    let actor_of_last = |id: Uuid| {
        let store = db.store.clone();
        async move {
            let log = store.transitions(id).await.unwrap();
            let last = log.last().unwrap();
            (last.to_state.clone(), last.actor.clone())
        }
    };
    assert_eq!(
        actor_of_last(review_form.id).await,
        ("APROBADO".to_owned(), "finance:ana".to_owned())
    );
    assert_eq!(
        actor_of_last(review_api.id).await,
        ("RECHAZADO".to_owned(), "finance:ana".to_owned())
    );
    let (refunds, duplicates): (Vec<_>, Vec<_>) = db
        .store
        .refunds_of(charge.id)
        .await
        .unwrap()
        .into_iter()
        .partition(|r| r.refund_of_gateway.is_none());
    assert_eq!(refunds.len(), 1);
    let log = db.store.transitions(refunds[0].id).await.unwrap();
    assert_eq!(log[0].actor, "api:app");
    let mut approvers = Vec::new();
    for d in &duplicates {
        let log = db.store.transitions(d.id).await.unwrap();
        approvers.push((d.refund_of_gateway.clone().unwrap(), log[0].actor.clone()));
    }
    approvers.sort();
    assert_eq!(
        approvers,
        [
            ("ch_dup_api".to_owned(), "finance:luis".to_owned()),
            ("ch_dup_form".to_owned(), "finance:ana".to_owned())
        ]
    );
    let new_charge = db.store.attempts_for_order("acc-new").await.unwrap();
    let log = db.store.transitions(new_charge[0].id).await.unwrap();
    assert_eq!(
        (log[0].cause.as_str(), log[0].actor.as_str()),
        ("enqueued", "api:app")
    );
    // Finance's retry: the declined attempt's retry asked for, by its person.
    let declined = db.store.attempts_for_order("acc-declined").await.unwrap();
    let log = db.store.transitions(declined[0].id).await.unwrap();
    let asked = log.last().unwrap();
    assert_eq!(
        (asked.cause.as_str(), asked.actor.as_str()),
        ("retry_requested", "finance:luis")
    );
    let open: Vec<i64> = db
        .store
        .open_cases()
        .await
        .unwrap()
        .iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(
        open,
        [doubled],
        "refunding a duplicate leaves its case open"
    );
    web.stop().await;
    db.drop_db().await;
}

async fn the_agent_reads_the_queue_and_the_summary_and_writes_nothing(b: Backend) {
    let db = TestDb::new(b).await;
    let web = web(&db).await;
    let http = client();
    let review = in_review(&db.store, "agent-review").await;
    let charge = approved(&db.store, "agent-approved").await;
    let rejected = declined(&db.store, "agent-declined").await;
    let case = open_case(&db, "ch_agent").await;
    let agent = |req: RequestBuilder| req.bearer_auth(secret("agent"));

    let queue: Value = agent(http.get(format!("{}/finance/api/escalations", web.url)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(queue["items"][0]["id"], json!(review.id));
    assert_eq!(queue["cases"][0]["id"], case);
    let summary = agent(http.get(format!("{}/finance/api/summary", web.url)))
        .send()
        .await
        .unwrap();
    assert_eq!(summary.status(), 200);
    let summary: Value = summary.json().await.unwrap();
    assert_eq!(summary["queue"]["en_revision"], 1);

    let before = snapshot(&db).await;
    let writes = [
        (
            format!("/finance/api/attempts/{}/resolve", review.id),
            json!({"action": "approve", "charge_id": "ch_1", "version": review.version, "note": "n"}),
        ),
        (
            format!("/finance/api/attempts/{}/retry", rejected.id),
            json!({}),
        ),
        (
            format!("/finance/api/cases/{case}/resolve"),
            json!({"note": "n"}),
        ),
        (
            format!("/finance/api/cases/{case}/refund-duplicate"),
            json!({"charge_id": "ch_1"}),
        ),
        (
            "/charges".into(),
            json!({"order_id": "agent-new", "amount_minor": 100, "currency": "USD"}),
        ),
        (
            "/refunds".into(),
            json!({"attempt_id": charge.id, "amount_minor": 100}),
        ),
    ];
    for (path, body) in &writes {
        let resp = agent(http.post(format!("{}{path}", web.url)))
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 403, "{path}");
        let err: Value = resp.json().await.unwrap();
        assert!(err["error"].as_str().unwrap().contains("agent"), "{err}");
    }
    // The page's forms too, signed in as the agent.
    let form = http
        .post(format!("{}/finance/cases/{case}/resolve", web.url))
        .basic_auth("agent", Some(secret("agent")))
        .form(&[("form_token", "x"), ("note", "n")])
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), 403);
    assert_eq!(snapshot(&db).await, before, "the agent changed nothing");
    assert_eq!(
        db.store.load(review.id).await.unwrap().0.state,
        State::EnRevision
    );
    web.stop().await;
    db.drop_db().await;
}

async fn a_cross_site_post_changes_nothing(b: Backend) {
    let db = TestDb::new(b).await;
    let web = web(&db).await;
    let http = client();
    let review = in_review(&db.store, "csrf-review").await;
    let rejected = declined(&db.store, "csrf-declined").await;
    let case = open_case(&db, "ch_csrf").await;
    let token = form_token(&http, &web.url, "ana", review.id).await;
    let host = web.url.trim_start_matches("http://").to_owned();
    let before = snapshot(&db).await;

    // What a page on another site can make a signed-in browser send: a
    // form post with `text/plain` (no preflight), its own Origin, and the
    // Basic sign-in the browser cached for this site.
    let api_posts = [
        (
            format!("/finance/api/attempts/{}/resolve", review.id),
            format!(
                r#"{{"action":"approve","charge_id":"ch_evil","version":{},"note":"x"}}"#,
                review.version
            ),
        ),
        (
            format!("/finance/api/attempts/{}/retry", rejected.id),
            "{}".into(),
        ),
        (
            format!("/finance/api/cases/{case}/resolve"),
            r#"{"note":"x"}"#.into(),
        ),
    ];
    for (path, body) in &api_posts {
        let browser = http
            .post(format!("{}{path}", web.url))
            .header("content-type", "text/plain")
            .header("origin", "https://evil.example")
            .header("sec-fetch-site", "cross-site")
            .basic_auth("ana", Some(secret("ana")))
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(browser.status(), 401, "{path}: the API never takes Basic");
        // Even with the key itself, a text/plain body is not JSON to us.
        let plain = http
            .post(format!("{}{path}", web.url))
            .header("content-type", "text/plain")
            .bearer_auth(secret("ana"))
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(plain.status(), 415, "{path}");
    }
    // The page's own forms, posted from another site with a stolen token:
    // the browser says where the post comes from.
    let form_path = format!("/finance/attempts/{}/resolve", review.id);
    let fields = [
        ("action", "approve".to_owned()),
        ("version", review.version.to_string()),
        ("form_token", token.clone()),
        ("note", "x".into()),
        ("charge_id", "ch_evil".into()),
    ];
    for (name, value) in [
        ("origin", "https://evil.example"),
        ("sec-fetch-site", "cross-site"),
        ("sec-fetch-site", "same-site"),
    ] {
        let resp = http
            .post(format!("{}{form_path}", web.url))
            .header(name, value)
            .basic_auth("ana", Some(secret("ana")))
            .form(&fields)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 403, "{name}: {value}");
    }
    // Without the token (another site cannot read it): refused.
    let no_token = http
        .post(format!("{}/finance/cases/{case}/resolve", web.url))
        .header("origin", format!("http://{host}"))
        .basic_auth("ana", Some(secret("ana")))
        .form(&[("form_token", "0".repeat(64)), ("note", "x".into())])
        .send()
        .await
        .unwrap();
    assert_eq!(no_token.status(), 403);
    assert_eq!(snapshot(&db).await, before, "nothing changed");

    // The same form from our own page goes through.
    let resp = http
        .post(format!("{}{form_path}", web.url))
        .header("origin", format!("http://{host}"))
        .header("sec-fetch-site", "same-origin")
        .basic_auth("ana", Some(secret("ana")))
        .form(&fields)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 303);
    assert_eq!(
        db.store.load(review.id).await.unwrap().0.state,
        State::Aprobado
    );
    web.stop().await;
    db.drop_db().await;
}

async fn only_the_webhook_receiver_and_health_are_open(b: Backend) {
    let db = TestDb::new(b).await;
    let web = web(&db).await;
    let http = client();
    let health = http
        .get(format!("{}/health", web.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    // The OpenAPI document is public: it holds no data.
    let doc = http
        .get(format!("{}/openapi.json", web.url))
        .send()
        .await
        .unwrap();
    assert_eq!(doc.status(), 200);
    let doc: Value = doc.json().await.unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    // The receiver answers a stranger, and the signature decides.
    let hook = http
        .post(format!("{}/webhooks/gateway", web.url))
        .json(&json!({"id": "evt_x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        hook.status(),
        400,
        "unsigned: missing headers, not a 401 for a key"
    );
    // With no keys configured at all, every guarded route is closed.
    let v = Verifier::from_env_value(Scheme::StandardWebhooks, &test_secret()).unwrap();
    let bare = start_web_cfg(cobro::web::WebConfig::new(db.store.clone(), v)).await;
    for path in [
        "/finance/api/summary",
        "/metrics",
        "/charges/00000000-0000-4000-8000-000000000000",
    ] {
        let resp = http
            .get(format!("{}{path}", bare.url))
            .bearer_auth(secret("app"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401, "{path}");
        let err: Value = resp.json().await.unwrap();
        assert!(
            err["error"].as_str().unwrap().contains("COBRO_API_KEYS"),
            "{err}"
        );
    }
    // With no keys, the document is still served.
    let doc = http
        .get(format!("{}/openapi.json", bare.url))
        .send()
        .await
        .unwrap();
    assert_eq!(doc.status(), 200);
    bare.stop().await;
    web.stop().await;
    db.drop_db().await;
}
