//! A real headless browser for the page tests (Debian's chromium driven
//! through chromedriver), shared by `tests/finance_browser.rs` and
//! `tests/operator_browser.rs` (each includes this file with
//! `#[path = "common/browser.rs"] mod browser;`).
//!
//! Needs `/usr/bin/chromium` and `/usr/bin/chromedriver` (`apt-get install
//! chromium chromium-driver`; `.ci/run` installs them). Without them a test
//! is skipped locally and fails under `CI=true`.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{ClientBuilder, Locator};

use super::common::{eventually, secret};

pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// chromedriver on a free 127.0.0.1 port, killed on drop.
pub struct Driver {
    child: Child,
    pub url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// chromedriver, listening; `None` (skip) when chromium is not installed
/// and `CI` is unset.
pub async fn start_driver() -> Option<Driver> {
    if !std::path::Path::new(CHROMIUM).exists() || !std::path::Path::new(CHROMEDRIVER).exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI=true but {CHROMIUM} or {CHROMEDRIVER} is missing (apt-get install chromium chromium-driver)"
        );
        super::common::python::skipped(
            &format!("{CHROMIUM} / {CHROMEDRIVER} not installed"),
            "apt-get install chromium chromium-driver (as root)",
        );
        return None;
    }
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let child = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .arg("--allowed-ips=127.0.0.1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    let url = format!("http://127.0.0.1:{port}");
    let driver = Driver { child, url };
    eventually(
        Duration::from_secs(20),
        "chromedriver to listen",
        || async {
            reqwest::get(format!("{}/status", driver.url))
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await;
    Some(driver)
}

/// A headless chromium session on `driver`.
pub async fn chromium(driver: &Driver) -> fantoccini::Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": CHROMIUM,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a chromium session")
}

/// Waits until the page that held `old` is gone. Submitting a form
/// returns once its button is clicked, before the navigation it starts has
/// replaced the page: an element looked up right after it can still be the
/// old page's, and goes stale under the caller (this failed a CI run).
pub async fn replaced(old: &fantoccini::elements::Element) {
    eventually(
        Duration::from_secs(10),
        "the page to be replaced",
        || async {
            match old.tag_name().await {
                Err(e) if e.is_stale_element_reference() => Some(()),
                _ => None,
            }
        },
    )
    .await;
}

/// The text of the element with id `id`, waiting up to 10 s for it to
/// appear (after a click, the next page may still be loading).
pub async fn text_of(browser: &fantoccini::Client, id: &str) -> String {
    browser
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Id(id))
        .await
        .unwrap_or_else(|e| panic!("#{id}: {e}"))
        .text()
        .await
        .unwrap()
}

/// Follows the "open" link of a listed row (to its detail page).
pub async fn open_row(row: &fantoccini::elements::Element) {
    row.find(Locator::Css("a.open"))
        .await
        .expect("the row has an open link")
        .click()
        .await
        .unwrap();
}

/// `web_url` with test key `name`'s Basic sign-in in it: the browser keeps
/// it for the site after the first page.
pub fn signed_in(web_url: &str, name: &str) -> String {
    web_url.replacen("http://", &format!("http://{name}:{}@", secret(name)), 1)
}

/// Another site for the cross-site tests: `router` served by plain axum
/// on `localhost` (another site than cobro's `127.0.0.1`), not by cobro's
/// own server loop, which would give it cobro's headers (no frames, no
/// scripts) and so refuse the attack before cobro is ever asked.
pub struct OtherSite {
    pub url: String,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl OtherSite {
    pub async fn start(router: axum::Router) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://localhost:{}", listener.local_addr().unwrap().port());
        let task = tokio::spawn(async move { axum::serve(listener, router).await });
        Self { url, task }
    }
}

impl Drop for OtherSite {
    fn drop(&mut self) {
        self.task.abort();
    }
}
