//! HTTP tests of the listing endpoints (`GET /v1/charges`, `GET /v1/refunds`) and of
//! `POST /control/inject`: pages, cursor, half-open window by execution time, 400s naming the
//! field, outage; injected charges and refunds land in the books like executed ones.
//!
//! Invariant: each test starts its own simulator and checks over HTTP only.

use chrono::{DateTime, TimeDelta, Utc};

use super::*;

impl Api {
    async fn inject(&self, body: &Value) -> reqwest::Result<Response> {
        self.post("/control/inject").json(body).send().await
    }

    /// Injects an approved charge of 500 EUR executed at `at`; asserts the 200.
    async fn inject_charge(&self, order: &str, at: DateTime<Utc>) -> TestResult<LedgerEntry> {
        let body = json!({"order_id": order, "amount_minor": 500, "currency": "EUR", "at": at});
        expect_json(self.inject(&body).await?, StatusCode::OK).await
    }

    async fn list(&self, path: &str, query: &[(&str, String)]) -> reqwest::Result<Response> {
        self.get(path).query(query).send().await
    }

    /// A page of `GET /v1/charges`; asserts the 200.
    async fn page(&self, query: &[(&str, String)]) -> TestResult<ListPage<LedgerEntry>> {
        expect_json(self.list("/v1/charges", query).await?, StatusCode::OK).await
    }
}

fn ids(p: &ListPage<LedgerEntry>) -> Vec<&str> {
    p.data.iter().map(|e| e.charge_id.as_str()).collect()
}

#[tokio::test]
async fn pages_follow_the_cursor_in_seq_order() -> TestResult {
    let sim = Sim::start().await?;
    for i in 0..5 {
        let resp = sim
            .charge(&key(), &body(&format!("order-{i}"), 100))
            .await?;
        assert_eq!(resp.status(), StatusCode::OK);
    }
    let limit = ("limit", "2".to_owned());
    let first = sim.page(std::slice::from_ref(&limit)).await?;
    assert_eq!(
        (ids(&first), first.has_more),
        (vec!["ch_000001", "ch_000002"], true)
    );
    let after = |id: &str| ("starting_after", id.to_owned());
    let second = sim.page(&[limit.clone(), after("ch_000002")]).await?;
    assert_eq!(
        (ids(&second), second.has_more),
        (vec!["ch_000003", "ch_000004"], true)
    );
    let last = sim.page(&[limit.clone(), after("ch_000004")]).await?;
    assert_eq!((ids(&last), last.has_more), (vec!["ch_000005"], false));
    let all = sim.page(&[]).await?;
    assert_eq!(
        (all.data.len(), all.has_more),
        (5, false),
        "default limit 100"
    );
    assert_eq!(all.data, sim.ledger().await?.entries);
    let refunds: ListPage<RefundEntry> = sim.list("/v1/refunds", &[]).await?.json().await?;
    assert!(refunds.data.is_empty() && !refunds.has_more);
    sim.stop().await
}

#[tokio::test]
async fn the_window_is_half_open_on_the_execution_time() -> TestResult {
    let sim = Sim::start().await?;
    let from = Utc::now() - TimeDelta::days(1);
    let to = from + TimeDelta::hours(1);
    let before = sim
        .inject_charge("o-before", from - TimeDelta::milliseconds(1))
        .await?;
    let at_from = sim.inject_charge("o-from", from).await?;
    let inside = sim
        .inject_charge("o-inside", to - TimeDelta::milliseconds(1))
        .await?;
    let at_to = sim.inject_charge("o-to", to).await?;
    let stamp = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let window = [("from", stamp(from)), ("to", stamp(to))];
    let p = sim.page(&window).await?;
    assert_eq!(
        ids(&p),
        [at_from.charge_id.as_str(), inside.charge_id.as_str()]
    );
    let open_start = sim.page(&window[1..]).await?;
    assert_eq!(open_start.data.len(), 3, "no from: everything before to");
    assert_eq!(open_start.data[0].charge_id, before.charge_id);
    let open_end = sim.page(&window[..1]).await?;
    assert_eq!(
        open_end.data.last().map(|e| &e.charge_id),
        Some(&at_to.charge_id)
    );
    sim.stop().await
}

#[tokio::test]
async fn bad_listing_queries_are_400_naming_the_field_and_an_outage_is_503() -> TestResult {
    let sim = Sim::start().await?;
    let cases: [(&str, &str, &str); 6] = [
        ("limit", "0", "limit"),
        ("limit", "1001", "limit"),
        ("limit", "ten", "limit"),
        ("from", "yesterday", "from"),
        ("to", "2026-13-01T00:00:00Z", "to"),
        ("starting_after", "ch_nope", "starting_after"),
    ];
    for (name, value, field) in cases {
        let resp = sim.list("/v1/charges", &[(name, value.to_owned())]).await?;
        assert_bad_request(resp, field, format!("{name}={value}")).await?;
    }
    let ok = sim.list("/v1/refunds", &[("limit", "1000".into())]).await?;
    assert_eq!(ok.status(), StatusCode::OK);
    sim.put_faults(&faults(|f| f.outage = true)).await?;
    let resp = sim.list("/v1/charges", &[]).await?;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(sim.ledger().await?.stats.list_requests, 8);
    sim.stop().await
}

#[tokio::test]
async fn injected_entries_land_in_the_books_like_executed_ones() -> TestResult {
    let sim = Sim::start().await?;
    // A charge through the API, then a second one under the same key,
    // injected (what a gateway without idempotency would do).
    let k = key();
    let first: ChargeResult = sim.charge(&k, &body("order-1", 1000)).await?.json().await?;
    let twin = json!({"idempotency_key": k, "order_id": "order-1", "amount_minor": 1000, "currency": "EUR"});
    let twin: LedgerEntry = sim.inject(&twin).await?.json().await?;
    assert_ne!(twin.charge_id, first.charge_id);
    assert_eq!((twin.seq, twin.status.as_str()), (2, APPROVED));
    let found: ChargeResult = sim.lookup(&k).await?.json().await?;
    assert_eq!(
        found.charge_id, first.charge_id,
        "a lookup still finds the first"
    );

    let declined = json!({"order_id": "order-2", "amount_minor": 10, "currency": "EUR",
                          "decline_code": "card_declined"});
    let declined: LedgerEntry = sim.inject(&declined).await?.json().await?;
    assert_eq!(declined.status, DECLINED);
    let over = json!({"kind": "refund", "charge_id": first.charge_id, "order_id": "order-1",
                      "amount_minor": 1001, "currency": "EUR"});
    let over: RefundEntry = sim.inject(&over).await?.json().await?;
    assert_eq!(over.decline_code.as_deref(), Some(AMOUNT_EXCEEDS_CHARGE));

    let l = sim.ledger().await?;
    assert_eq!((l.entries.len(), l.refunds.len()), (3, 1));
    assert_eq!((l.stats.injected, l.stats.executed), (3, 3));

    let bad: [(Value, &str); 5] = [
        (
            json!({"order_id": "o", "amount_minor": 0, "currency": "EUR"}),
            "amount_minor",
        ),
        (
            json!({"order_id": "o", "amount_minor": 5, "currency": "eur"}),
            "currency",
        ),
        (
            json!({"order_id": " ", "amount_minor": 5, "currency": "EUR"}),
            "order_id",
        ),
        (
            json!({"kind": "refund", "order_id": "o", "amount_minor": 5, "currency": "EUR"}),
            "charge_id",
        ),
        (
            json!({"kind": "payout", "order_id": "o", "amount_minor": 5, "currency": "EUR"}),
            "kind",
        ),
    ];
    for (b, field) in bad {
        assert_bad_request(sim.inject(&b).await?, field, &b).await?;
    }
    sim.stop().await
}
