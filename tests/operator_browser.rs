//! The operator's page in a real headless browser (issue 14, item 5):
//! search an order, open it, see its history and lookups; while the
//! incident switch pauses sending, its banner is on every operator page.
//! (That a pause stops new sends while lookups go on is
//! `tests/pause.rs`.) On both backends.
//!
//! Needs chromium and chromedriver ([`browser`]); without them the test is
//! skipped locally and fails under `CI=true`.

#[macro_use]
mod common;
#[allow(dead_code)]
#[path = "common/browser.rs"]
mod browser;

use std::time::Duration;

use browser::{chromium, open_row, replaced, signed_in, start_driver, text_of};
use cobro::domain::ChargeRequest;
use cobro::state::Event;
use common::*;
use fantoccini::Locator;

on_both_dbs!(an_operator_searches_an_order_and_reads_its_history_while_paused,);

async fn an_operator_searches_an_order_and_reads_its_history_while_paused(db: &TestDb) {
    let Some(driver) = start_driver().await else {
        return;
    };
    let doubt = in_review(&db.store, "order-ops-1").await;
    for order in ["order-ops-2", "order-ops-3"] {
        let req = ChargeRequest::parse(order, 1_500, "USD", None, None).unwrap();
        let a = enqueued(&db.store, &req).await;
        let a = step(&db.store, &a, Event::Claim, None).await;
        step(&db.store, &a, Event::Approved, Some("ch_ops")).await;
    }
    db.store
        .set_sending_paused(true, "api:ana", Some("INC-7 gateway double-charges"))
        .await
        .unwrap();
    let web = web_on(&db.store).await;
    let browser = chromium(&driver).await;

    // Without credentials nothing is shown.
    browser
        .goto(&format!("{}/operator/attempts", web.url))
        .await
        .unwrap();
    let shown = browser.source().await.unwrap();
    assert!(!shown.contains("order-ops-1"), "{shown}");

    // Signed in with a key that has attempts:read: every attempt, and the
    // incident switch's banner.
    let signed = signed_in(&web.url, "agent");
    browser
        .goto(&format!("{signed}/operator/attempts"))
        .await
        .unwrap();
    assert_eq!(text_of(&browser, "person").await, "agent");
    let banner = text_of(&browser, "paused").await;
    assert!(
        banner.contains("Sending paused") && banner.contains("INC-7"),
        "{banner}"
    );
    let rows = browser
        .find_all(Locator::Css("#attempts tbody tr"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 3);

    // Search an order. The unfiltered page lists that order's row too:
    // wait for it to be replaced before looking for the row.
    let page = browser.find(Locator::Css("html")).await.unwrap();
    let form = browser.form(Locator::Id("search")).await.unwrap();
    form.set_by_name("order_id", "order-ops-1").await.unwrap();
    form.submit().await.unwrap();
    replaced(&page).await;
    let row = browser
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css(&format!("tr[data-attempt='{}']", doubt.id)))
        .await
        .expect("the order's attempt is listed");
    let rows = browser
        .find_all(Locator::Css("#attempts tbody tr"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "only that order");
    let row_text = row.text().await.unwrap();
    assert!(
        row_text.contains("order-ops-1") && row_text.contains("EN_REVISION"),
        "{row_text}"
    );
    assert!(text_of(&browser, "paused").await.contains("INC-7"));

    // Open it: its history and its lookups, under the banner.
    open_row(&row).await;
    assert_eq!(text_of(&browser, "state").await, "EN_REVISION");
    let history = browser
        .find_all(Locator::Css("#history tbody tr"))
        .await
        .unwrap();
    let mut moves = Vec::new();
    for row in &history {
        let cells = row.find_all(Locator::Css("td")).await.unwrap();
        moves.push(format!(
            "{} -> {}",
            cells[1].text().await.unwrap(),
            cells[2].text().await.unwrap()
        ));
    }
    assert_eq!(
        moves,
        [
            "(new) -> PENDIENTE",
            "PENDIENTE -> EN_PROCESO",
            "EN_PROCESO -> DESCONOCIDO",
            "DESCONOCIDO -> EN_REVISION"
        ]
    );
    let lookups = text_of(&browser, "checks").await;
    assert!(
        lookups.contains("failed") && lookups.contains("worker:test"),
        "{lookups}"
    );
    assert!(text_of(&browser, "paused").await.contains("INC-7"));

    // Sending resumed: the banner is gone.
    db.store
        .set_sending_paused(false, "api:ana", None)
        .await
        .unwrap();
    browser.refresh().await.unwrap();
    assert_eq!(text_of(&browser, "state").await, "EN_REVISION");
    assert!(
        browser.find(Locator::Id("paused")).await.is_err(),
        "no banner once resumed"
    );
    browser.close().await.unwrap();
    web.stop().await;
    drop(driver);
}
