//! Finance's escalation queue: what reaches it, what it shows, resolutions
//! through the state machine (once; a stale view is refused), the API as
//! the signed-in key, CSV and the daily summary. On both backends. Who may
//! call which route is tested in tests/access.rs; the browser test of the
//! page lives in tests/finance_browser.rs.

#[macro_use]
mod common;

use std::time::Duration;

use cobro::domain::ChargeRequest;
use cobro::finance::{self, Filter, Resolution, ResolveError, ResolveRequest};
use cobro::sim::Faults;
use cobro::state::{Event, State};
use cobro::store::{Attempt, Change, Lease, Store};
use common::*;
use serde_json::{Value, json};

on_both_dbs!(
    an_escalated_attempt_shows_its_evidence_and_is_resolved_once,
    check_again_now_takes_a_fresh_lookup_through_a_real_worker,
    the_api_resolves_as_the_signed_in_person_and_refuses_clearly,
    the_csv_export_opens_cleanly_in_a_spreadsheet,
    the_daily_summary_is_deterministic_and_counts_right,
    reconciliation_cases_are_in_the_queue_and_closed_once,
    finance_cannot_decide_while_a_worker_is_asking_the_gateway,
);

/// An attempt whose checks ran out: EN_REVISION with a 503 as last evidence.
async fn in_review(store: &Store, order: &str, amount: i64, currency: &str) -> Attempt {
    let req = ChargeRequest::parse(order, amount, currency, None, None).unwrap();
    in_review_of(store, &req).await
}

/// An attempt left DESCONOCIDO (young).
async fn in_doubt(store: &Store, order: &str) -> Attempt {
    let req = ChargeRequest::parse(order, 700, "EUR", None, None).unwrap();
    let a = enqueued(store, &req).await;
    let a = step(store, &a, Event::Claim, None).await;
    step(store, &a, Event::Unknown, None).await
}

fn approve(a: &Attempt, version: i64, by: &'static str) -> ResolveRequest<'static> {
    ResolveRequest {
        attempt_id: a.id,
        version,
        resolution: Resolution::Approve {
            charge_id: "ch_found_in_dashboard".into(),
        },
        by,
        note: "seen captured in the gateway dashboard",
    }
}

async fn an_escalated_attempt_shows_its_evidence_and_is_resolved_once(db: &TestDb) {
    let review = in_review(&db.store, "fin-review", 12_345, "USD").await;
    let young = in_doubt(&db.store, "fin-young").await;
    let hour = Duration::from_secs(3600);

    // EN_REVISION is in the queue at once; a young DESCONOCIDO only once stale.
    let q = finance::queue(&db.store, hour, &Filter::default())
        .await
        .unwrap();
    assert_eq!(q.len(), 1);
    assert_eq!((q[0].attempt.id, q[0].reason()), (review.id, "en_revision"));
    assert_eq!(
        finance::last_evidence(&q[0].attempt),
        (Some(503), Some("http_5xx".into()), Some("failed".into()))
    );
    let q = finance::queue(&db.store, Duration::ZERO, &Filter::default())
        .await
        .unwrap();
    assert_eq!(q.len(), 2);
    assert_eq!(q[1].attempt.id, young.id);
    assert_eq!(q[1].reason(), "stale_desconocido");
    let only_review = Filter {
        state: Some("EN_REVISION".into()),
        ..Filter::default()
    };
    assert_eq!(
        finance::queue(&db.store, Duration::ZERO, &only_review)
            .await
            .unwrap()
            .len(),
        1
    );
    let detail = finance::detail(&db.store, review.id).await.unwrap();
    let path: Vec<&str> = detail
        .transitions
        .iter()
        .map(|t| t.to_state.as_str())
        .collect();
    assert_eq!(
        path,
        ["PENDIENTE", "EN_PROCESO", "DESCONOCIDO", "EN_REVISION"]
    );

    // Bad input names the field and writes nothing.
    let mut bad = approve(&review, review.version, "ana");
    bad.resolution = Resolution::Approve {
        charge_id: String::new(),
    };
    let err = finance::resolve(&db.store, &bad).await.unwrap_err();
    assert!(
        matches!(&err, ResolveError::Invalid(e) if e.field == "charge_id"),
        "{err:?}"
    );
    let mut bad = approve(&review, review.version, "ana");
    bad.note = "  ";
    let err = finance::resolve(&db.store, &bad).await.unwrap_err();
    assert!(
        matches!(&err, ResolveError::Invalid(e) if e.field == "note"),
        "{err:?}"
    );

    // Resolved once, by name, with the note, through the state machine.
    let now = finance::resolve(&db.store, &approve(&review, review.version, "ana"))
        .await
        .unwrap();
    assert_eq!(now.state, State::Aprobado);
    assert_eq!(
        now.gateway_charge_id.as_deref(),
        Some("ch_found_in_dashboard")
    );
    let log = db.store.transitions(review.id).await.unwrap();
    let last = log.last().unwrap();
    assert_eq!(
        (last.from_state.as_deref(), last.to_state.as_str()),
        (Some("EN_REVISION"), "APROBADO")
    );
    assert_eq!(
        (last.cause.as_str(), last.actor.as_str()),
        ("finance_approved", "finance:ana")
    );
    assert_eq!(
        last.evidence.as_ref().unwrap()["detail"],
        "seen captured in the gateway dashboard"
    );

    // A second resolution from the same (now stale) view: a clear error.
    let twice = finance::resolve(&db.store, &approve(&review, review.version, "luis"))
        .await
        .unwrap_err();
    assert!(
        matches!(&twice, ResolveError::Moved(m) if m.contains("changed since you looked")),
        "{twice:?}"
    );
    // Even with the current version: settled, nothing to resolve.
    let settled = finance::resolve(&db.store, &approve(&review, now.version, "luis"))
        .await
        .unwrap_err();
    assert!(matches!(&settled, ResolveError::NotEscalated(m) if m.contains("APROBADO")));
    assert_eq!(
        db.store.transitions(review.id).await.unwrap().len(),
        log.len()
    );

    // Something that moved meanwhile (a worker's check) is not overwritten.
    let seen = young.version;
    let mut take = Change::new(None, "check", "worker:w");
    take.lease = Lease::Take {
        owner: "w",
        ttl: Duration::from_secs(5),
    };
    db.store.apply(&young, &take).await.unwrap();
    let mut decline = approve(&young, seen, "ana");
    decline.resolution = Resolution::Decline {
        code: "finance_declined".into(),
    };
    let err = finance::resolve(&db.store, &decline).await.unwrap_err();
    assert!(matches!(err, ResolveError::Moved(_)), "{err:?}");
    assert_eq!(
        db.store.load(young.id).await.unwrap().0.state,
        State::Desconocido
    );
}

async fn check_again_now_takes_a_fresh_lookup_through_a_real_worker(db: &TestDb) {
    // Charged, answer lost, and every lookup fails: the checks run out.
    let sim = start_sim(true, answers_lost_lookups_fail()).await;
    let worker = spawn_worker(worker_args(&db.url, &sim.url()));
    let req = ChargeRequest::parse("fin-recheck", 4_200, "USD", None, None).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;
    let review = settled(&db.store, id, State::EnRevision, Duration::from_secs(30)).await;
    assert_eq!(review.check_count, 5);

    // The gateway answers again; finance asks for a fresh lookup.
    set_faults(&sim.url(), &Faults::default()).await;
    check_now(
        &db.store,
        &review,
        "gateway status page says the incident is over",
    )
    .await;
    let done = settled(&db.store, id, State::Aprobado, Duration::from_secs(20)).await;
    assert_eq!(done.send_count, 1, "looked up, never re-sent");
    let log = db.store.transitions(id).await.unwrap();
    let causes: Vec<&str> = log.iter().map(|t| t.cause.as_str()).collect();
    assert_eq!(
        &causes[causes.len() - 2..],
        ["finance_check_now", "lookup_approved"]
    );
    assert_eq!(log[log.len() - 2].actor, "finance:ana");
    assert_eq!(ledger(&sim.url()).await.entries.len(), 1, "charged once");
    finish(worker, sim).await;
}

/// The web process with the finance routes and the test keys.
async fn the_api_resolves_as_the_signed_in_person_and_refuses_clearly(db: &TestDb) {
    let a = in_review(&db.store, "fin-api", 990, "EUR").await;
    let web = web_on(&db.store).await;
    let http = reqwest::Client::new();
    let resolve = |body: Value| {
        let req = http
            .post(format!("{}/finance/api/attempts/{}/resolve", web.url, a.id))
            .bearer_auth(secret("luis"))
            .json(&body);
        async move {
            let resp = req.send().await.unwrap();
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap())
        }
    };
    let (status, err) = resolve(
        json!({"action": "decline", "version": a.version, "note": "x", "code": "Not A Code"}),
    )
    .await;
    assert_refused(status, &err, 422, "code");
    let (status, err) =
        resolve(json!({"action": "decline", "version": a.version, "code": "finance_declined"}))
            .await;
    assert_refused(status, &err, 422, "note");
    let (status, _) = resolve(json!({"action": "refund_everything", "version": a.version})).await;
    assert_eq!(status, 422);
    // A "by" in the body is not who resolves: the signed-in user is. It is
    // refused, as every field the route does not take, and nothing moves.
    let (status, err) = resolve(json!({
        "action": "decline", "version": a.version, "code": "finance_declined",
        "note": "gateway shows no charge for this key", "by": "ana"
    }))
    .await;
    assert_refused(status, &err, 422, "by");
    assert_eq!(db.store.load(a.id).await.unwrap().0.version, a.version);
    let (status, now) = resolve(json!({
        "action": "decline", "version": a.version, "code": "finance_declined",
        "note": "gateway shows no charge for this key"
    }))
    .await;
    // It was sent: the decline is asked for (202), recorded by a worker
    // on the gateway's word.
    assert_eq!(status, 202, "{now}");
    assert_eq!(now["state"], "EN_REVISION");
    assert_last_move(&db.store, a.id, "finance_decline_requested", "finance:luis").await;
    let (status, err) =
        resolve(json!({"action": "check_now", "version": a.version, "note": "again"})).await;
    assert_refused(status, &err, 409, "version");
    // The gateway confirms it (the review janitor's part:
    // charge_gate::finance_declines): declined.
    let (asked, _) = db.store.load(a.id).await.unwrap();
    step(&db.store, &asked, Event::Declined, Some("finance_declined")).await;

    // The HTML form refuses a post without the user's form token.
    let resp = http
        .post(format!("{}/finance/attempts/{}/resolve", web.url, a.id))
        .basic_auth("ana", Some(secret("ana")))
        .form(&[
            ("action", "approve"),
            ("version", "0"),
            ("form_token", "forged"),
            ("note", "n"),
            ("charge_id", "ch_x"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);

    // Finance's manual business retry, through the same guards.
    let retry_url = format!("{}/finance/api/attempts/{}/retry", web.url, a.id);
    let (status, asked) = post_json(&retry_url, As::Bearer("luis"), &json!({})).await;
    assert_eq!(status, 202);
    assert_eq!(asked["retry_of"], a.id.to_string());
    assert_eq!(asked["attempt_number"], 2);
    assert_last_move(&db.store, a.id, "retry_requested", "finance:luis").await;
    // A worker looks the declined attempt up, then creates the retry with
    // the key the answer named.
    let sim = start_sim(true, cobro::sim::Faults::default()).await;
    engine(&db.store, &sim.url(), "w")
        .process(a.id)
        .await
        .unwrap();
    let order = db.store.attempts_for_order(&a.order_id).await.unwrap();
    let retry = order
        .iter()
        .find(|r| r.attempt_number == 2)
        .expect("the retry");
    assert_eq!(retry.idempotency_key.to_string(), asked["idempotency_key"]);
    sim.shutdown().await;
    let (again, _) = post_json(&retry_url, As::Bearer("luis"), &json!({})).await;
    assert_eq!(again, 409, "already being retried");
    web.stop().await;
}

/// Minimal RFC 4180 reader: quoted fields with doubled quotes and line breaks.
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let (mut rows, mut row, mut cell) = (Vec::new(), Vec::new(), String::new());
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                cell.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => cell.push(c),
            (false, '"') => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut cell)),
            (false, '\r') => {}
            (false, '\n') => {
                row.push(std::mem::take(&mut cell));
                rows.push(std::mem::take(&mut row));
            }
            (false, c) => cell.push(c),
        }
    }
    rows
}

async fn the_csv_export_opens_cleanly_in_a_spreadsheet(db: &TestDb) {
    in_review(&db.store, "=HYPERLINK(\"http://evil\")", 1_999, "USD").await;
    in_review(&db.store, "fin, with comma", 1_999, "JPY").await;
    in_review(&db.store, "fin-kwd", 1_999, "KWD").await;
    let web = web_on(&db.store).await;
    let resp = get_as(
        &format!("{}/finance/escalations.csv", web.url),
        As::Basic("ana"),
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_content_type(&resp, "text/csv");
    assert!(header(&resp, "content-disposition").contains("attachment"));
    let text = resp.text().await.unwrap();
    assert!(text.ends_with("\r\n"));
    let rows = parse_csv(&text);
    assert_eq!(rows.len(), 4, "header + 3 items:\n{text}");
    let header = &rows[0];
    assert!(rows.iter().all(|r| r.len() == header.len()), "{rows:?}");
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let by_currency = |c: &str| {
        rows.iter()
            .find(|r| r[col("currency")] == c)
            .unwrap()
            .clone()
    };
    assert_eq!(by_currency("USD")[col("amount")], "19.99");
    assert_eq!(by_currency("JPY")[col("amount")], "1999");
    assert_eq!(by_currency("KWD")[col("amount")], "1.999");
    assert_eq!(
        by_currency("USD")[col("order_id")],
        "'=HYPERLINK(\"http://evil\")"
    );
    assert_eq!(by_currency("JPY")[col("order_id")], "fin, with comma");
    for r in &rows[1..] {
        chrono::DateTime::parse_from_rfc3339(&r[col("created_at")]).expect("ISO 8601 timestamp");
        assert_eq!(r[col("state")], "EN_REVISION");
        assert_eq!(r[col("last_http_status")], "503");
    }
    web.stop().await;
}

async fn the_daily_summary_is_deterministic_and_counts_right(db: &TestDb) {
    in_review(&db.store, "fin-s1", 1_000, "USD").await;
    in_review(&db.store, "fin-s2", 2_500, "USD").await;
    in_doubt(&db.store, "fin-s3").await;
    let at = chrono::DateTime::parse_from_rfc3339("2026-11-30T08:00:00Z")
        .unwrap()
        .to_utc();
    let one = finance::summarize(&db.store, Duration::ZERO, at)
        .await
        .unwrap();
    let two = finance::summarize(&db.store, Duration::ZERO, at)
        .await
        .unwrap();
    assert_eq!(one, two);
    assert_eq!(one.to_text(), two.to_text());
    assert_eq!(
        serde_json::to_string(&one).unwrap(),
        serde_json::to_string(&two).unwrap()
    );
    assert_eq!((one.queue.en_revision, one.queue.stale_desconocido), (2, 1));
    assert_eq!(one.queue.by_age[0], ("< 1 h".to_owned(), 3));
    assert_eq!(
        one.queue.amounts,
        [
            ("EUR".to_owned(), "7.00".to_owned()),
            ("USD".to_owned(), "35.00".to_owned())
        ]
    );
    let usd_review = one
        .totals
        .iter()
        .find(|l| l.state == "EN_REVISION" && l.currency == "USD")
        .unwrap();
    assert_eq!((usd_review.count, usd_review.amount.as_str()), (2, "35.00"));
    assert_eq!(one.oldest.len(), 3);
    assert!(one.to_text().contains("2 in EN_REVISION, 1 DESCONOCIDO"));
    // Read-only: nothing was written.
    assert_eq!(db.attempts().await, 3);
}

async fn reconciliation_cases_are_in_the_queue_and_closed_once(db: &TestDb) {
    db.exec(
        "INSERT INTO cobro.recon_cases (kind, dedupe_key, order_id, gateway_ref, details, window_from, window_to)
         VALUES ('unmatched_charge', 'unmatched_charge:ch_9', 'order-9', 'ch_9', '{\"gateway\": {\"amount_minor\": 500}}',
                 now() - interval '1 day', now())",
        "INSERT INTO recon_cases (kind, dedupe_key, order_id, gateway_ref, details, window_from, window_to, opened_at)
         VALUES ('unmatched_charge', 'unmatched_charge:ch_9', 'order-9', 'ch_9', '{\"gateway\": {\"amount_minor\": 500}}',
                 0, 1, 2)",
        &[],
    )
    .await
    .unwrap();
    let web = web_on(&db.store).await;
    let http = reqwest::Client::new();
    let list: Value = get_json(
        &format!("{}/finance/api/escalations", web.url),
        As::Bearer("ana"),
    )
    .await;
    let cases = list["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 1);
    assert_eq!(cases[0]["kind"], "unmatched_charge");
    let id = cases[0]["id"].as_i64().unwrap();
    let page = get_text(&format!("{}/finance", web.url), As::Basic("ana")).await;
    assert!(page.contains(&format!("data-case=\"{id}\"")) && page.contains("ch_9"));
    let summary = finance::summarize(&db.store, Duration::ZERO, chrono::Utc::now())
        .await
        .unwrap();
    assert_eq!(summary.open_cases, 1);

    let close = |note: &'static str| {
        let req = http
            .post(format!("{}/finance/api/cases/{id}/resolve", web.url))
            .bearer_auth(secret("ana"))
            .json(&json!({ "note": note }));
        async move {
            let resp = req.send().await.unwrap();
            (resp.status().as_u16(), resp.json::<Value>().await.unwrap())
        }
    };
    let (status, err) = close("").await;
    assert_refused(status, &err, 422, "note");
    let (status, case) = close("refunded ch_9 in the gateway dashboard").await;
    assert_eq!(status, 200, "{case}");
    assert_eq!(case["resolved_by"], "finance:ana");
    let (status, err) = close("again").await;
    assert_eq!(status, 409);
    assert!(
        err["error"]
            .as_str()
            .unwrap()
            .contains("already resolved by finance:ana"),
        "{err}"
    );
    assert!(finance::open_cases(&db.store).await.unwrap().is_empty());
    web.stop().await;
}

async fn finance_cannot_decide_while_a_worker_is_asking_the_gateway(db: &TestDb) {
    let a = in_doubt(&db.store, "fin-busy").await;
    // A worker takes the lease to look the charge up (as a check does).
    let mut take = Change::new(None, "check", "worker:w1");
    take.lease = Lease::Take {
        owner: "w1",
        ttl: Duration::from_secs(30),
    };
    let cobro::store::Applied::Moved(held) = db.store.apply(&a, &take).await.unwrap() else {
        panic!("lease not taken");
    };
    let decline = ResolveRequest {
        attempt_id: a.id,
        version: held.version,
        resolution: Resolution::Decline {
            code: "finance_declined".into(),
        },
        by: "ana",
        note: "no charge in the dashboard",
    };
    let err = finance::resolve(&db.store, &decline).await.unwrap_err();
    assert!(matches!(err, ResolveError::Busy(_)), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("w1") && msg.contains("try again after"),
        "{msg}"
    );
    assert_eq!(
        db.store.load(a.id).await.unwrap().0.version,
        held.version,
        "nothing written"
    );
    // The worker's lookup finds the charge and records it.
    let mut found = Change::new(Some(Event::Approved), "lookup_approved", "worker:w1");
    found.charge_id = Some("ch_late");
    let cobro::store::Applied::Moved(now) = db.store.apply(&held, &found).await.unwrap() else {
        panic!("the worker's answer was not recorded");
    };
    assert_eq!(now.state, State::Aprobado, "the gateway's answer stands");
    // A decision on the version seen before is refused as stale, not applied.
    let err = finance::resolve(&db.store, &decline).await.unwrap_err();
    assert!(matches!(err, ResolveError::Moved(_)), "{err:?}");
}
