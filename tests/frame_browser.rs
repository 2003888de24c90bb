//! Another site cannot frame cobro's pages (clickjacking): in a real
//! headless Chromium signed in to the finance page, a page on another
//! origin frames `/finance` and the browser refuses to show it (the frame
//! holds Chromium's error page, not the queue), while the same page
//! loaded top-level shows the queue, and the attacker's own page in a
//! second frame shows (so the frame check itself can see a framed page).
//!
//! Needs chromium and chromedriver ([`browser`]); without them the test is
//! skipped locally and fails under `CI=true`.

#[macro_use]
mod common;
#[allow(dead_code)]
#[path = "common/browser.rs"]
mod browser;

use std::time::Duration;

use browser::{chromium, signed_in, start_driver};
use cobro::domain::ChargeRequest;
use cobro::state::Event;
use common::*;
use fantoccini::Locator;

on_both_dbs!(another_site_cannot_frame_the_finance_page,);

/// What the document in frame `index` of the current page is: its URL and
/// whether it shows the finance queue and the attacker's own marker.
async fn framed(browser: &fantoccini::Client, index: u16) -> (String, bool, bool) {
    browser.clone().enter_frame(index).await.unwrap();
    let url = browser
        .execute("return document.location.href", vec![])
        .await
        .map(|v| v.as_str().unwrap_or("").to_owned())
        .unwrap_or_else(|e| format!("(no script: {e})"));
    let queue = browser.find(Locator::Css("#queue")).await.is_ok();
    let own = browser.find(Locator::Css("#own")).await.is_ok();
    browser.clone().enter_parent_frame().await.unwrap();
    (url, queue, own)
}

async fn another_site_cannot_frame_the_finance_page(db: &TestDb) {
    let Some(driver) = start_driver().await else {
        return;
    };
    let req = ChargeRequest::parse("order-framed", 1_000, "USD", None, Some("pm_test")).unwrap();
    let a = enqueued(&db.store, &req).await;
    let a = step(&db.store, &a, Event::Claim, None).await;
    let a = step(&db.store, &a, Event::Unknown, None).await;
    step(&db.store, &a, Event::ChecksExhausted, None).await;
    let web = web_on(&db.store).await;
    let browser = chromium(&driver).await;

    // Top-level, signed in: the queue shows.
    let signed = signed_in(&web.url, "ana");
    browser.goto(&format!("{signed}/finance")).await.unwrap();
    browser
        .find(Locator::Css("#queue tr[data-attempt]"))
        .await
        .expect("the queue, top-level");

    // The attacker's page on another origin (`localhost` is another site
    // than `127.0.0.1`): cobro's page in one frame, its own in another.
    let target = format!("{}/finance", web.url);
    let attacker = axum::Router::new()
        .route(
            "/",
            axum::routing::get(move || async move {
                axum::response::Html(format!(
                    "<!doctype html><html><body><h1>Win a prize</h1>\
                     <iframe id=\"victim\" src=\"{target}\" width=\"800\" height=\"600\"></iframe>\
                     <iframe id=\"mine\" src=\"/own\"></iframe></body></html>"
                ))
            }),
        )
        .route(
            "/own",
            axum::routing::get(|| async {
                axum::response::Html("<!doctype html><p id=\"own\">the attacker's own page</p>")
            }),
        );
    let attacker = browser::OtherSite::start(attacker).await;
    let site = attacker.url.clone();
    browser.goto(&format!("{site}/")).await.unwrap();
    let (own_url, _, own) = eventually(Duration::from_secs(10), "the frames to load", || {
        let browser = browser.clone();
        async move { Some(framed(&browser, 1).await).filter(|f| f.2) }
    })
    .await;
    assert!(own, "the attacker's own frame shows ({own_url})");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (url, queue, _) = framed(&browser, 0).await;
    eprintln!("the framed cobro page's document: {url}");
    assert!(
        !queue,
        "the finance queue showed inside another site's frame"
    );
    assert!(
        !url.starts_with(&web.url),
        "the frame holds cobro's document ({url}): it was not refused"
    );

    browser.close().await.unwrap();
    web.stop().await;
    drop(attacker);
}
