//! Cross-site posts and sessions: what a page on another site can make a
//! signed-in browser send (a `text/plain` form post, its own `Origin`, the
//! Basic sign-in it cached, a stolen or missing form token) changes
//! nothing; the same form from our own page goes through.

use cobro::state::State;

use super::common::{self, TestDb, secret, web_on};
use super::fixtures::{client, declined, form_token, in_review, open_case, snapshot};

on_both_dbs!(a_cross_site_post_changes_nothing,);

async fn a_cross_site_post_changes_nothing(db: &TestDb) {
    let web = web_on(&db.store).await;
    let http = client();
    let review = in_review(&db.store, "csrf-review").await;
    let rejected = declined(&db.store, "csrf-declined").await;
    let case = open_case(db, "ch_csrf").await;
    let token = form_token(&http, &web.url, "ana", review.id).await;
    let host = web.url.trim_start_matches("http://").to_owned();
    let before = snapshot(db).await;

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
    assert_eq!(snapshot(db).await, before, "nothing changed");

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
}
