//! Which scope each route needs: every guarded route × {no credential, a
//! forged one, a key without the route's scope, the right key} → 401 / 401
//! / 403 / 2xx, a refused request changing nothing, and the key's name the
//! actor of what it wrote; the "agent" key (read scopes only) lists the
//! queue and gets the summary, and gets 403 on every write.

use cobro::state::State;
use reqwest::{Method, RequestBuilder, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use super::common::{self, TestDb, assert_last_move, open_case_ids, secret, send_json, web_on};
use super::fixtures::{
    approved, client, declined, double_charge_case, form_token, in_review, open_case,
    retry_pending, snapshot,
};

on_both_dbs!(
    every_route_needs_a_credential_with_its_scope,
    the_agent_reads_the_queue_and_the_summary_and_writes_nothing,
);

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

async fn every_route_needs_a_credential_with_its_scope(db: &TestDb) {
    let web = web_on(&db.store).await;
    let http = client();
    let charge = approved(&db.store, "acc-approved").await;
    let review_form = in_review(&db.store, "acc-review-form").await;
    let review_api = in_review(&db.store, "acc-review-api").await;
    let rejected = declined(&db.store, "acc-declined").await;
    retry_pending(&db.store, "acc-new-card").await;
    let case_form = open_case(db, "ch_form").await;
    let case_api = open_case(db, "ch_api").await;
    let doubled = double_charge_case(db, &charge.order_id).await;
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
        let before = snapshot(db).await;
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
            snapshot(db).await,
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
    // A charge that was sent: its decline is asked for, in review.
    assert_eq!(
        actor_of_last(review_api.id).await,
        ("EN_REVISION".to_owned(), "finance:ana".to_owned())
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
    assert_last_move(&db.store, declined[0].id, "retry_requested", "finance:luis").await;
    assert_eq!(
        open_case_ids(&db.store).await,
        [doubled],
        "refunding a duplicate leaves its case open"
    );
    web.stop().await;
}

async fn the_agent_reads_the_queue_and_the_summary_and_writes_nothing(db: &TestDb) {
    let web = web_on(&db.store).await;
    let http = client();
    let review = in_review(&db.store, "agent-review").await;
    let charge = approved(&db.store, "agent-approved").await;
    let rejected = declined(&db.store, "agent-declined").await;
    let case = open_case(db, "ch_agent").await;
    let agent = |req: RequestBuilder| req.bearer_auth(secret("agent"));

    let queue: Value = send_json(agent(
        http.get(format!("{}/finance/api/escalations", web.url)),
    ))
    .await;
    assert_eq!(queue["items"][0]["id"], json!(review.id));
    assert_eq!(queue["cases"][0]["id"], case);
    let summary = agent(http.get(format!("{}/finance/api/summary", web.url)))
        .send()
        .await
        .unwrap();
    assert_eq!(summary.status(), 200);
    let summary: Value = summary.json().await.unwrap();
    assert_eq!(summary["queue"]["en_revision"], 1);

    let before = snapshot(db).await;
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
    assert_eq!(snapshot(db).await, before, "the agent changed nothing");
    assert_eq!(
        db.store.load(review.id).await.unwrap().0.state,
        State::EnRevision
    );
    web.stop().await;
}
