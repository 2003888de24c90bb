//! The pages over real HTTP, on both backends: every page carries the
//! headers that forbid framing, sniffing and referrers, and no inline
//! script or style; a value with markup renders escaped; form tokens are
//! bound to the browser's sign-in and expire (refused, nothing written);
//! `GET /` asks for credentials and links what the key may see. (Paging
//! and the CSV export: `tests/paging.rs`.)

#[macro_use]
mod common;

use std::time::Duration;

use cobro::domain::ChargeRequest;
use cobro::state::State;
use cobro::store::{Attempt, Store};
use common::*;

on_both_dbs!(
    pages_forbid_framing_and_escape_markup,
    form_tokens_are_bound_to_a_sign_in_and_expire,
    the_landing_page_asks_for_credentials_and_links_what_the_key_may_see,
);

const COOKIE_A: &str = "cobro_signin=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const COOKIE_B: &str = "cobro_signin=bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

async fn in_review(store: &Store, order: &str) -> Attempt {
    let req = ChargeRequest::parse(order, 1_000, "USD", None, Some("pm_test")).unwrap();
    in_review_of(store, &req).await
}

async fn pages_forbid_framing_and_escape_markup(db: &TestDb) {
    let web = web_on(&db.store).await;
    let evil = "<script>alert(1)</script>\"'&";
    let a = in_review(&db.store, evil).await;
    let pages = [
        "/".to_owned(),
        "/finance".into(),
        format!("/finance/attempts/{}", a.id),
        "/finance/summary".into(),
        "/operator/attempts".into(),
        format!("/operator/attempts/{}", a.id),
        format!("/operator/attempts?order_id={}", "%3Cscript%3E"),
    ];
    for path in &pages {
        let resp = get_as(&format!("{}{path}", web.url), As::Basic("agent")).await;
        assert!(resp.status().is_success(), "{path}: {}", resp.status());
        let h = resp.headers().clone();
        let get = |name: &str| h.get(name).and_then(|v| v.to_str().ok()).unwrap_or("");
        assert_eq!(get("x-frame-options"), "DENY", "{path}");
        assert_eq!(get("x-content-type-options"), "nosniff", "{path}");
        assert_eq!(get("referrer-policy"), "same-origin", "{path}");
        let csp = get("content-security-policy");
        assert!(csp.contains("frame-ancestors 'none'"), "{path}: {csp}");
        assert!(csp.contains("default-src 'none'"), "{path}: {csp}");
        assert!(!csp.contains("unsafe-inline"), "{path}: {csp}");
        assert!(get("content-type").starts_with("text/html"), "{path}");
        let body = resp.text().await.unwrap();
        assert!(!body.contains("<script"), "{path}: a script in the page");
        assert!(!body.contains(" style="), "{path}: an inline style");
        assert!(body.contains("/assets/cobro.css"), "{path}");
    }
    // The order id shows, escaped, where it is shown.
    for path in [
        "/finance".to_owned(),
        format!("/finance/attempts/{}", a.id),
        format!("/operator/attempts/{}", a.id),
    ] {
        let body = get_text(&format!("{}{path}", web.url), As::Basic("agent")).await;
        assert!(
            body.contains("&lt;script&gt;alert(1)&lt;/script&gt;&quot;'&amp;"),
            "{path}: the order id escaped"
        );
    }
    // JSON routes carry the headers too, and the stylesheet is CSS.
    let css = get_as(&format!("{}/assets/cobro.css", web.url), As::Nobody).await;
    assert_eq!(css.status(), 200);
    assert_content_type(&css, "text/css");
    assert_eq!(css.headers()["x-frame-options"], "DENY");
    let health = get_as(&format!("{}/health", web.url), As::Nobody).await;
    assert_eq!(health.headers()["x-content-type-options"], "nosniff");
    web.stop().await;
}

/// The form token on `path`'s page as `cookie`'s sign-in sees it.
async fn token(http: &reqwest::Client, url: &str, path: &str, cookie: &str) -> String {
    let req = http
        .get(format!("{url}{path}"))
        .basic_auth("ana", Some(secret("ana")))
        .header("cookie", cookie);
    form_token_in(&send_text(req).await)
}

async fn form_tokens_are_bound_to_a_sign_in_and_expire(db: &TestDb) {
    let mut cfg = web_config(&db.store, test_verifier());
    cfg.finance.form_token_ttl = Duration::from_secs(1);
    let web = start_web_cfg(cfg).await;
    let http = no_redirects();
    let a = in_review(&db.store, "tok-review").await;
    let page = format!("/finance/attempts/{}", a.id);

    // A browser's first page starts its sign-in: an HttpOnly, SameSite
    // cookie, not readable by scripts nor sent from other sites.
    let first = get_as(&format!("{}{page}", web.url), As::Basic("ana")).await;
    let cookie = first.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(cookie.starts_with("cobro_signin="), "{cookie}");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"),
        "{cookie}"
    );
    // A page seen with the cookie does not start another sign-in.
    let again = http
        .get(format!("{}{page}", web.url))
        .basic_auth("ana", Some(secret("ana")))
        .header("cookie", COOKIE_A)
        .send()
        .await
        .unwrap();
    assert!(again.headers().get("set-cookie").is_none());
    // A program (Bearer) has no forms and gets no cookie.
    let program = get_as(&format!("{}{page}", web.url), As::Bearer("ana")).await;
    assert!(program.headers().get("set-cookie").is_none());

    let post = |cookie: &'static str, token: String| {
        let http = http.clone();
        let url = format!("{}{page}/resolve", web.url);
        let version = a.version.to_string();
        async move {
            http.post(url)
                .basic_auth("ana", Some(secret("ana")))
                .header("cookie", cookie)
                .header("sec-fetch-site", "same-origin")
                .form(&[
                    ("action", "approve".to_owned()),
                    ("version", version),
                    ("form_token", token),
                    ("note", "seen at the gateway".into()),
                    ("charge_id", "ch_tok".into()),
                ])
                .send()
                .await
                .unwrap()
        }
    };
    let versions = || async { db.store.load(a.id).await.unwrap().0.version };
    let before = (versions().await, db.store.transition_rows().await.unwrap());

    // Another sign-in's token (another browser, or before the cookie
    // changed): refused, the page says to reload, nothing written.
    let theirs = token(&http, &web.url, &page, COOKIE_B).await;
    let resp = post(COOKIE_A, theirs).await;
    assert_eq!(resp.status(), 403);
    let text = resp.text().await.unwrap();
    assert!(
        text.contains("not made for this sign-in") && text.contains("Reload the page"),
        "{text}"
    );
    // No cookie at all: the same, and a post (another site's, whose
    // requests carry no SameSite cookie) does not start a new sign-in.
    let mine = token(&http, &web.url, &page, COOKIE_A).await;
    let resp = post("other=1", mine.clone()).await;
    assert_eq!(resp.status(), 403);
    assert!(resp.headers().get("set-cookie").is_none());

    // An expired token of this very sign-in: refused, nothing written.
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    let resp = post(COOKIE_A, mine).await;
    assert_eq!(resp.status(), 403);
    let text = resp.text().await.unwrap();
    assert!(
        text.contains("has expired") && text.contains("Reload the page"),
        "{text}"
    );
    assert_eq!(
        (versions().await, db.store.transition_rows().await.unwrap()),
        before,
        "nothing was written"
    );
    assert_eq!(
        db.store.load(a.id).await.unwrap().0.state,
        State::EnRevision
    );

    // A fresh page's token of this sign-in goes through.
    let fresh = token(&http, &web.url, &page, COOKIE_A).await;
    let resp = post(COOKIE_A, fresh).await;
    assert_eq!(resp.status(), 303, "{}", resp.text().await.unwrap());
    assert_eq!(db.store.load(a.id).await.unwrap().0.state, State::Aprobado);
    web.stop().await;
}

async fn the_landing_page_asks_for_credentials_and_links_what_the_key_may_see(db: &TestDb) {
    let web = web_on(&db.store).await;
    let http = no_redirects();
    let anonymous = get_as(&format!("{}/", web.url), As::Nobody).await;
    assert_eq!(anonymous.status(), 401);
    assert!(
        anonymous.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Basic realm=\"cobro\"")
    );
    let wrong = http
        .get(format!("{}/", web.url))
        .basic_auth("ana", Some("not-the-secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    // (key, sees the finance links, sees the operator link)
    for (key, finance, operator) in [
        ("ana", true, false),
        ("agent", true, true),
        ("app", false, true),
    ] {
        let resp = get_as(&format!("{}/", web.url), As::Basic(key)).await;
        assert_eq!(resp.status(), 200, "{key}");
        let body = resp.text().await.unwrap();
        assert!(
            body.contains(&format!("<b id=\"person\">{key}</b>")),
            "{key}"
        );
        assert_eq!(
            body.contains("id=\"finance\" href=\"/finance\""),
            finance,
            "{key}"
        );
        assert_eq!(body.contains("id=\"summary\""), finance, "{key}");
        assert_eq!(
            body.contains("id=\"operator\" href=\"/operator/attempts\""),
            operator,
            "{key}"
        );
        // The navigation follows the same rule: no link to a page that
        // would refuse this key.
        let nav = &body[body.find("<nav>").unwrap()..body.find("</nav>").unwrap()];
        assert_eq!(nav.contains("href=\"/finance\""), finance, "{key}: {nav}");
        assert_eq!(
            nav.contains("href=\"/operator/attempts\""),
            operator,
            "{key}: {nav}"
        );
    }
    // Bearer works too; a key that can see no page is told which scopes would.
    let bearer = get_as(&format!("{}/", web.url), As::Bearer("agent")).await;
    assert_eq!(bearer.status(), 200);
    let prom = get_as(&format!("{}/", web.url), As::Basic("prom")).await;
    assert_eq!(prom.status(), 403);
    let text = prom.text().await.unwrap();
    assert!(
        text.contains("finance:read") && text.contains("attempts:read"),
        "{text}"
    );
    web.stop().await;
}
