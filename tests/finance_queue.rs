//! Finance's queue filtered and paginated in SQL (every row exactly once
//! across pages, true totals, no cap) and the bulk "check again now" (only
//! the matching attempts in review, each a compare-and-set write on the
//! record as the person), through the library, the API, the page and the
//! CLI. On both backends.

#[macro_use]
mod common;

use std::collections::HashSet;
use std::time::Duration;

use cobro::domain::ChargeRequest;
use cobro::finance::{self, Filter, PageRequest};
use cobro::state::{Event, State};
use cobro::store::{Applied, Attempt, Change, Store};
use common::*;
use serde_json::{Value, json};
use uuid::Uuid;

on_both_dbs!(
    the_queue_pages_every_row_exactly_once_with_filters,
    bulk_check_now_schedules_exactly_the_matching_attempts_in_review,
);

/// In review (checks exhausted) with the janitor's next check an hour out.
async fn in_review(store: &Store, order: &str, currency: &str) -> Attempt {
    let req = ChargeRequest::parse(order, 1_000, currency, None, None).unwrap();
    let a = enqueued(store, &req).await;
    review(store, a).await
}

async fn review(store: &Store, a: Attempt) -> Attempt {
    let a = step(store, &a, Event::Claim, None).await;
    let a = step(store, &a, Event::Unknown, None).await;
    let mut c = Change::new(Some(Event::ChecksExhausted), "checks_exhausted", "worker:t");
    c.act_in = Some(Duration::from_secs(3600));
    match store.apply(&a, &c).await.unwrap() {
        Applied::Moved(now) => *now,
        Applied::Lost => panic!("lost"),
    }
}

async fn in_doubt(store: &Store, order: &str, currency: &str) -> Attempt {
    let req = ChargeRequest::parse(order, 700, currency, None, None).unwrap();
    let a = enqueued(store, &req).await;
    let a = step(store, &a, Event::Claim, None).await;
    step(store, &a, Event::Unknown, None).await
}

/// A refund of an approved charge, in review.
async fn refund_in_review(store: &Store, order: &str) -> Attempt {
    let req = ChargeRequest::parse(order, 5_000, "USD", None, None).unwrap();
    let a = enqueued(store, &req).await;
    let a = step(store, &a, Event::Claim, None).await;
    let charge = step(store, &a, Event::Approved, None).await;
    let r = ask_refund(store, charge.id, 1_000, "app").await;
    let refund = store.load(r.refund_id).await.unwrap().0;
    review(store, refund).await
}

/// Every page of `filter`, `limit` at a time: (ids in order, totals seen).
async fn all_pages(store: &Store, filter: &Filter, limit: u32) -> (Vec<Uuid>, HashSet<i64>) {
    let (mut ids, mut totals) = (Vec::new(), HashSet::new());
    let mut after = None;
    for _ in 0..100 {
        let page = finance::queue_page(
            store,
            Duration::ZERO,
            filter,
            &PageRequest {
                after: after.clone(),
                limit: Some(limit),
            },
        )
        .await
        .unwrap();
        assert!(page.items.len() <= limit as usize);
        ids.extend(page.items.iter().map(|e| e.attempt.id));
        totals.insert(page.total);
        match page.next {
            Some(next) => after = Some(next),
            None => return (ids, totals),
        }
    }
    panic!("more than 100 pages");
}

async fn the_queue_pages_every_row_exactly_once_with_filters(db: &TestDb) {
    let mut usd = Vec::new();
    for i in 0..7 {
        usd.push(in_review(&db.store, &format!("q-usd-{i}"), "USD").await.id);
    }
    let mut eur = Vec::new();
    for i in 0..3 {
        eur.push(in_review(&db.store, &format!("q-eur-{i}"), "EUR").await.id);
    }
    let doubt = in_doubt(&db.store, "q-doubt", "USD").await.id;
    let refund = refund_in_review(&db.store, "q-refund").await.id;
    // Two of the USD ones are two hours old.
    for id in &usd[..2] {
        db.exec(
            "UPDATE cobro.payment_attempts SET created_at = created_at - interval '2 hours' WHERE id = $1::uuid",
            "UPDATE payment_attempts SET created_at = created_at - 7200000 WHERE id = ?1",
            &[&id.to_string()],
        )
        .await
        .unwrap();
    }

    // USD in review: every one exactly once, oldest first, the true total on every page.
    let filter = Filter {
        state: Some("EN_REVISION".into()),
        currency: Some("usd".into()),
        ..Filter::default()
    };
    let (ids, totals) = all_pages(&db.store, &filter, 3).await;
    let mut want = usd.clone();
    want.push(refund);
    assert_eq!(ids.len(), want.len(), "{ids:?}");
    assert_eq!(ids.iter().collect::<HashSet<_>>(), want.iter().collect());
    assert_eq!(totals, HashSet::from([8]));
    // Oldest first, ties by id (SQLite keeps milliseconds: ties happen).
    let set = |v: &[Uuid]| v.iter().copied().collect::<HashSet<_>>();
    assert_eq!(
        set(&ids[..2]),
        set(&usd[..2]),
        "the backdated ones come first"
    );
    let mut keys = Vec::new();
    for id in &ids {
        let a = db.store.load(*id).await.unwrap().0;
        keys.push((a.created_at, a.id));
    }
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
    // Page size 1: the same rows in the same order.
    assert_eq!(all_pages(&db.store, &filter, 1).await.0, ids);

    // The whole queue (the DESCONOCIDO one is stale at once here).
    let (everything, totals) = all_pages(&db.store, &Filter::default(), 4).await;
    assert_eq!(everything.len(), 12);
    assert_eq!(everything.iter().collect::<HashSet<_>>().len(), 12);
    assert_eq!(totals, HashSet::from([12]));
    assert!(everything.contains(&doubt) && eur.iter().all(|e| everything.contains(e)));

    // Each filter in SQL.
    let store = &db.store;
    let count = |f: Filter| async move { all_pages(store, &f, 2).await.0 };
    let refunds = count(Filter {
        kind: Some("refund".into()),
        ..Filter::default()
    })
    .await;
    assert_eq!(refunds, [refund]);
    let old = count(Filter {
        min_age_secs: Some(3600),
        ..Filter::default()
    })
    .await;
    assert_eq!((old.len(), set(&old)), (2, set(&usd[..2])));
    let doubtful = count(Filter {
        state: Some("DESCONOCIDO".into()),
        ..Filter::default()
    })
    .await;
    assert_eq!(doubtful, [doubt]);
    let (charges_eur, _) = all_pages(
        &db.store,
        &Filter {
            currency: Some("EUR".into()),
            kind: Some("charge".into()),
            ..Filter::default()
        },
        10,
    )
    .await;
    assert_eq!((charges_eur.len(), set(&charges_eur)), (3, set(&eur)));

    // The default staleness keeps the young DESCONOCIDO out.
    let page = finance::queue_page(
        &db.store,
        Duration::from_secs(3600),
        &Filter::default(),
        &PageRequest::default(),
    )
    .await
    .unwrap();
    assert_eq!((page.total, page.items.len()), (11, 11));
    assert!(page.next.is_none());
    // Every item says when it is looked up next.
    assert!(page.items.iter().all(|e| e.next_check_at.is_some()));

    // Bad input names the field.
    for (filter, page, field) in [
        (
            Filter {
                state: Some("APROBADO".into()),
                ..Filter::default()
            },
            PageRequest::default(),
            "state",
        ),
        (
            Filter {
                kind: Some("both".into()),
                ..Filter::default()
            },
            PageRequest::default(),
            "kind",
        ),
        (
            Filter::default(),
            PageRequest {
                after: Some("garbage".into()),
                limit: None,
            },
            "after",
        ),
        (
            Filter::default(),
            PageRequest {
                after: None,
                limit: Some(finance::MAX_PAGE_SIZE + 1),
            },
            "limit",
        ),
    ] {
        let err = finance::queue_page(&db.store, Duration::ZERO, &filter, &page)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, finance::QueueError::Invalid(e) if e.field == field),
            "{err:?}"
        );
    }

    // The API: the same pages through `next`, the same total.
    let web = web_on(&db.store).await;
    let mut api_ids = Vec::new();
    let mut url = format!(
        "{}/finance/api/escalations?state=EN_REVISION&currency=USD&limit=3",
        web.url
    );
    loop {
        let body: Value = get_json(&url, As::Bearer("ana")).await;
        assert_eq!(body["total"], 8, "{body}");
        for item in body["items"].as_array().unwrap() {
            api_ids.push(item["id"].as_str().unwrap().parse::<Uuid>().unwrap());
            assert!(item["next_check_at"].is_string(), "{item}");
        }
        match body["next"].as_str() {
            Some(next) => {
                url = format!(
                    "{}/finance/api/escalations?state=EN_REVISION&currency=USD&limit=3&after={next}",
                    web.url
                )
            }
            None => break,
        }
    }
    assert_eq!(api_ids, ids);
    let resp = get_as(
        &format!("{}/finance/api/escalations?limit=501", web.url),
        As::Bearer("ana"),
    )
    .await;
    assert_eq!(resp.status(), 422);
    let err: Value = resp.json().await.unwrap();
    assert_eq!(err["field"], "limit");

    // The page shows the true total, a page of items and a next-page link.
    let html = get_text(
        &format!("{}/finance?currency=USD&state=EN_REVISION", web.url),
        As::Basic("ana"),
    )
    .await;
    assert!(html.contains("<span id=\"total\">8</span>"), "{html}");
    assert!(html.contains("Next automatic check at"));
    assert!(
        !html.contains("id=\"next\""),
        "8 rows fit on one page of 50"
    );
    web.stop().await;
}

async fn bulk_check_now_schedules_exactly_the_matching_attempts_in_review(db: &TestDb) {
    let mut usd = Vec::new();
    for i in 0..3 {
        usd.push(in_review(&db.store, &format!("b-usd-{i}"), "USD").await);
    }
    let mut eur = Vec::new();
    for i in 0..2 {
        eur.push(in_review(&db.store, &format!("b-eur-{i}"), "EUR").await);
    }
    let doubt = in_doubt(&db.store, "b-doubt", "USD").await;

    // Bad input writes nothing.
    let err = finance::check_now_all(&db.store, Duration::ZERO, &Filter::default(), "ana", " ")
        .await
        .unwrap_err();
    assert!(matches!(&err, finance::QueueError::Invalid(e) if e.field == "note"));

    let usd_only = Filter {
        currency: Some("USD".into()),
        ..Filter::default()
    };
    let done = finance::check_now_all(
        &db.store,
        Duration::ZERO,
        &usd_only,
        "ana",
        "gateway incident over",
    )
    .await
    .unwrap();
    assert_eq!(
        (
            done.scheduled,
            done.busy,
            done.moved,
            done.skipped_desconocido
        ),
        (3, 0, 0, 1)
    );
    for a in &usd {
        let (now, db_now) = db.store.load(a.id).await.unwrap();
        assert_eq!(now.state, State::EnRevision);
        assert!(now.next_action_at.unwrap() <= db_now, "due now");
        assert_eq!(now.version, a.version + 1);
        let last = db.store.transitions(a.id).await.unwrap().pop().unwrap();
        assert_eq!(
            (
                last.from_state.as_deref(),
                last.to_state.as_str(),
                last.cause.as_str(),
                last.actor.as_str()
            ),
            (
                Some("EN_REVISION"),
                "EN_REVISION",
                "finance_check_now",
                "finance:ana"
            )
        );
        assert_eq!(
            last.evidence.as_ref().unwrap()["detail"],
            "gateway incident over"
        );
    }
    for a in &eur {
        let (now, _) = db.store.load(a.id).await.unwrap();
        assert_eq!(now.version, a.version, "not matched, not touched");
    }
    let (d, _) = db.store.load(doubt.id).await.unwrap();
    assert_eq!(
        d.version, doubt.version,
        "DESCONOCIDO keeps its own schedule"
    );
    // The entry into review is still the one before: the schedule keeps its origin.
    let log = db.store.transitions(usd[0].id).await.unwrap();
    let entry = cobro::janitor::entered_review(&log).unwrap();
    assert_eq!(
        log.iter()
            .find(|t| t.to_state == "EN_REVISION")
            .map(|t| t.at),
        Some(entry)
    );

    // The API, as the signed-in person, JSON only.
    let web = web_on(&db.store).await;
    let http = reqwest::Client::new();
    let check_now = format!("{}/finance/api/check-now", web.url);
    let (status, err) =
        post_json(&check_now, As::Bearer("luis"), &json!({"currency": "EUR"})).await;
    assert_eq!(status, 422);
    assert_eq!(err["field"], "note");
    let body = json!({"currency": "EUR", "note": "x"});
    let (status, _) = post_json(&check_now, As::Bearer("agent"), &body).await;
    assert_eq!(status, 403, "finance:read is not enough");
    let body = json!({"currency": "EUR", "kind": "charge", "note": "after the incident"});
    let (status, body) = post_json(&check_now, As::Bearer("luis"), &body).await;
    assert_eq!(status, 200);
    assert_eq!(body["scheduled"], 2, "{body}");
    assert_eq!(body["skipped_desconocido"], 0, "{body}");
    for a in &eur {
        let last = db.store.transitions(a.id).await.unwrap().pop().unwrap();
        assert_eq!(last.actor, "finance:luis");
    }

    // The page's form needs the person's form token.
    let resp = http
        .post(format!("{}/finance/check-now", web.url))
        .basic_auth("ana", Some(secret("ana")))
        .header("origin", web.url.clone())
        .form(&[("form_token", "forged"), ("note", "n")])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    let all_versions: Vec<i64> = {
        let mut v = Vec::new();
        for a in usd.iter().chain(&eur) {
            v.push(db.store.load(a.id).await.unwrap().0.version);
        }
        v
    };
    assert_eq!(all_versions, [a_plus(&usd, 1), a_plus(&eur, 1)].concat());
    web.stop().await;
}

fn a_plus(attempts: &[Attempt], n: i64) -> Vec<i64> {
    attempts.iter().map(|a| a.version + n).collect()
}
