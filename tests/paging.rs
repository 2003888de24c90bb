//! Paging over real HTTP, on both backends: open reconciliation cases are
//! paged by their own cursor, so the finance page and
//! `/finance/api/escalations?limit=1` stay small with 30,000 of them and
//! paging reaches each case exactly once; the CSV export, streamed a page
//! at a time, holds every row of the queue once, oldest first. (Its
//! memory, on the real process: `tests/export_memory.rs`.)

#[macro_use]
mod common;

use std::collections::HashSet;

use common::*;
use serde_json::Value;

on_both_dbs!(
    open_cases_are_paged_and_pages_stay_small,
    the_csv_streams_every_row_once_across_pages,
);

const CASES: i64 = 30_000;

async fn open_cases_are_paged_and_pages_stay_small(db: &TestDb) {
    // 30,000 open cases, each with what both sides said (ties on the
    // opening time, to exercise the cursor's tie-break by id).
    db.exec(
        "INSERT INTO cobro.recon_cases (kind, dedupe_key, order_id, gateway_ref, details, window_from, window_to, opened_at)
         SELECT 'unmatched_charge', 'unmatched_charge:ch_' || i, 'order-' || i, 'ch_' || i,
                jsonb_build_object('gateway', jsonb_build_object('id', 'ch_' || i, 'amount_minor', 1999,
                    'currency', 'USD', 'status', 'approved'), 'ours', null),
                now() - interval '1 day', now(), now() - interval '1 hour' + (i / 7) * interval '1 ms'
           FROM generate_series(1, 30000) i",
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 30000)
         INSERT INTO recon_cases (kind, dedupe_key, order_id, gateway_ref, details, window_from, window_to, opened_at)
         SELECT 'unmatched_charge', 'unmatched_charge:ch_' || i, 'order-' || i, 'ch_' || i,
                json_object('gateway', json_object('id', 'ch_' || i, 'amount_minor', 1999,
                    'currency', 'USD', 'status', 'approved'), 'ours', null),
                0, 1, 1000 + i / 7
           FROM s",
        &[],
    )
    .await
    .unwrap();
    let web = web_on(&db.store).await;
    let get = |path: String| {
        let url = format!("{}{path}", web.url);
        async move {
            let resp = get_as(&url, As::Bearer("ana")).await;
            let status = resp.status();
            (status, resp.text().await.unwrap())
        }
    };

    let (status, small) = get("/finance/api/escalations?limit=1".into()).await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&small).unwrap();
    assert_eq!(v["cases_total"], CASES);
    assert_eq!(v["cases"].as_array().unwrap().len(), 50);
    let (_, page) = get("/finance".into()).await;
    eprintln!(
        "with {CASES} open cases: /finance/api/escalations?limit=1 is {} bytes, /finance is {} bytes",
        small.len(),
        page.len()
    );
    assert!(small.len() < 64 * 1024, "{} bytes", small.len());
    assert!(page.len() < 128 * 1024, "{} bytes", page.len());
    assert!(page.contains("<span id=\"cases-total\">30000</span> open"));
    // The page's own link leads to the next page of cases.
    let at = page
        .find("id=\"cases-next\" href=\"")
        .expect("a next page of cases")
        + 22;
    let next = page[at..at + page[at..].find('"').unwrap()].replace("&amp;", "&");
    let (status, second) = get(next).await;
    assert_eq!(status, 200);
    assert!(second.contains("data-case"), "the second page lists cases");

    // Every case exactly once, page by page, in order.
    let mut seen = HashSet::new();
    let mut last = 0;
    let mut after: Option<String> = None;
    loop {
        let path = match &after {
            None => "/finance/api/escalations?limit=1&cases_limit=500".to_owned(),
            Some(c) => format!("/finance/api/escalations?limit=1&cases_limit=500&cases_after={c}"),
        };
        let (status, body) = get(path).await;
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        let cases = v["cases"].as_array().unwrap();
        assert!(cases.len() <= 500);
        for c in cases {
            assert!(
                seen.insert(c["id"].as_i64().unwrap()),
                "case {} twice",
                c["id"]
            );
            last += 1;
        }
        match v["cases_next"].as_str() {
            Some(c) => after = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(last, CASES);
    let all: HashSet<i64> = open_case_ids(&db.store).await.into_iter().collect();
    assert_eq!(seen, all, "paging reached every open case");

    // A page larger than the maximum, or a forged cursor: 422 naming it.
    let (status, body) = get("/finance/api/escalations?cases_limit=501".into()).await;
    assert_eq!(status, 422);
    assert!(body.contains("\"cases_limit\""), "{body}");
    let (status, body) = get("/finance/api/escalations?cases_after=nonsense".into()).await;
    assert_eq!(status, 422);
    assert!(body.contains("\"cases_after\""), "{body}");
    // A well-formed cursor whose time no database can hold (about
    // 250,000 BC; PostgreSQL stops at 4713 BC):
    // refused like any forged one, not a 503 from PostgreSQL.
    let far = format!("-8000000000000000000_{}", uuid::Uuid::new_v4());
    for field in ["cases_after", "after"] {
        let (status, body) = get(format!("/finance/api/escalations?{field}={far}")).await;
        assert_eq!(status, 422, "{field}: {body}");
        assert!(body.contains(&format!("\"{field}\"")), "{body}");
    }
    web.stop().await;
}

/// More rows than one page of the export (1,000): the CSV is read page by
/// page and holds each row once, in the queue's order; a bad filter is
/// refused before anything is sent.
async fn the_csv_streams_every_row_once_across_pages(db: &TestDb) {
    db.exec(
        "INSERT INTO cobro.payment_attempts
             (id, order_id, amount_minor, currency, idempotency_key, state, next_action_at,
              send_count, check_count, version, created_at)
         SELECT gen_random_uuid(), 'csv-' || i, 1000 + i, 'USD', gen_random_uuid(), 'EN_REVISION',
                now() + interval '1 day', 1, 5, 7, now() - interval '2 days' + (i / 3) * interval '1 ms'
           FROM generate_series(1, 2500) i",
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 2500)
         INSERT INTO payment_attempts
             (id, order_id, amount_minor, currency, idempotency_key, state, next_action_at,
              send_count, check_count, version, created_at, updated_at)
         SELECT printf('%08x-0000-4000-8000-%012x', i, i), 'csv-' || i, 1000 + i, 'USD',
                printf('%08x-1111-4000-8000-%012x', i, i), 'EN_REVISION',
                (unixepoch() + 86400) * 1000, 1, 5, 7, 1700000000000 + i / 3, 1700000000000
           FROM s",
        &[],
    )
    .await
    .unwrap();
    let web = web_on(&db.store).await;
    let resp = get_as(
        &format!("{}/finance/escalations.csv", web.url),
        As::Bearer("ana"),
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert!(header(&resp, "content-disposition").contains("attachment"));
    let text = resp.text().await.unwrap();
    let lines: Vec<&str> = text.split_terminator("\r\n").collect();
    assert_eq!(lines.len(), 2_501, "a header and a row each");
    assert!(lines[0].starts_with("attempt_id,order_id,"));
    let orders: Vec<&str> = lines[1..]
        .iter()
        .map(|l| l.split(',').nth(1).unwrap())
        .collect();
    let unique: HashSet<&str> = orders.iter().copied().collect();
    assert_eq!(unique.len(), 2_500, "each row once");
    let numbers: Vec<i64> = orders.iter().map(|o| o[4..].parse().unwrap()).collect();
    assert!(
        numbers.windows(2).all(|w| w[0] / 3 <= w[1] / 3),
        "oldest first"
    );
    let bad = get_as(
        &format!("{}/finance/escalations.csv?state=NOPE", web.url),
        As::Bearer("ana"),
    )
    .await;
    assert_eq!(bad.status(), 422);
    assert!(bad.text().await.unwrap().contains("\"state\""));
    web.stop().await;
}
