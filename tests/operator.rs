//! The operator view (issue 14, item 5): every attempt searched by order,
//! key, state, kind and date, newest first, paginated in SQL, each with its
//! history and lookups; over the API (`GET /attempts`) and the pages
//! (`/operator/attempts`). On both backends. The CLI is
//! `tests/operator_cli.rs`, the browser `tests/operator_browser.rs`.

#[macro_use]
mod common;
#[path = "common/operator_seed.rs"]
mod operator_seed;

use cobro::store::Attempt;
use common::*;
use operator_seed::{ids, seed};
use serde_json::Value;

on_both_backends!(
    the_api_searches_pages_and_refuses_bad_parameters,
    the_pages_need_a_key_escape_everything_and_show_the_pause,
);

/// GET `path` as test key `who` (Bearer), or with no credential.
async fn get(web: &Web, path: &str, who: Option<&str>) -> (u16, Value) {
    let mut req = reqwest::Client::new().get(format!("{}{path}", web.url));
    if let Some(who) = who {
        req = req.bearer_auth(secret(who));
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn the_api_searches_pages_and_refuses_bad_parameters(b: Backend) {
    let s = seed(b).await;
    let web = web_on(&s.db.store).await;
    let all = s.newest_first();
    assert_eq!(all.len(), 7);

    let (status, body) = get(&web, "/attempts", Some("app")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(ids(&body), all, "newest first, ties by id");
    assert!(body["next_cursor"].is_null());

    // Pages of 2, then of 1 (through the ties): the same rows, once each.
    for limit in [2, 1] {
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let path = match &cursor {
                None => format!("/attempts?limit={limit}"),
                Some(c) => format!("/attempts?limit={limit}&cursor={c}"),
            };
            let (status, body) = get(&web, &path, Some("app")).await;
            assert_eq!(status, 200, "{body}");
            assert!(ids(&body).len() <= limit);
            seen.extend(ids(&body));
            match body["next_cursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => break,
            }
        }
        assert_eq!(seen, all, "pages of {limit}");
    }

    let id = |a: &Attempt| a.id.to_string();
    let key3 = s.op3.idempotency_key.to_string();
    for (query, want) in [
        ("order_id=op-2", vec![id(&s.retry), id(&s.op2)]),
        ("order_id=op-2&state=RECHAZADO", vec![id(&s.op2)]),
        ("order_id=op-4%20%3Cb%3E%26%22x%22", vec![id(&s.op4)]),
        ("order_id=op-9", vec![]),
        (&format!("key={key3}"), vec![id(&s.op3)]),
        ("state=EN_REVISION", vec![id(&s.op3)]),
        ("state=APROBADO", vec![id(&s.op1)]),
        ("kind=refund", vec![id(&s.refund)]),
        ("kind=business_retry", vec![id(&s.retry)]),
        ("from=2026-01-15&to=2026-01-15", vec![id(&s.old)]),
        ("to=2026-01-15T10:00:00Z", vec![]),
        ("from=2026-05-31T00:00:00Z&to=2026-06-02&kind=charge", {
            let mut v = vec![id(&s.op1), id(&s.op2)];
            v.sort();
            v.reverse();
            v
        }),
    ] {
        let (status, body) = get(&web, &format!("/attempts?{query}"), Some("app")).await;
        assert_eq!(status, 200, "{query}: {body}");
        assert_eq!(ids(&body), want, "{query}");
    }
    let (_, charges) = get(&web, "/attempts?kind=charge", Some("app")).await;
    assert_eq!(ids(&charges).len(), 6);
    assert!(
        charges["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["kind"] != "refund")
    );

    // A bad parameter is a 400 naming it; nothing is ignored or cut.
    for (query, field) in [
        ("state=approved", "state"),
        ("kind=refunds", "kind"),
        ("key=not-a-key", "key"),
        ("from=yesterday", "from"),
        ("from=2026-02-01&to=2026-01-01", "to"),
        ("cursor=nope", "cursor"),
        ("limit=101", "limit"),
        ("limit=0", "limit"),
        ("stat=APROBADO", "stat"),
        ("state=APROBADO&state=RECHAZADO", "state"),
    ] {
        let (status, body) = get(&web, &format!("/attempts?{query}"), Some("app")).await;
        assert_eq!(
            (status, body["field"].as_str()),
            (400, Some(field)),
            "{query}: {body}"
        );
    }

    // Who may look: attempts:read, by Bearer only.
    let (status, _) = get(&web, "/attempts", None).await;
    assert_eq!(status, 401);
    let (status, body) = get(&web, "/attempts", Some("ana")).await;
    assert_eq!(status, 403, "finance:read is not attempts:read: {body}");
    let (status, _) = get(&web, "/attempts", Some("agent")).await;
    assert_eq!(status, 200);
    let basic = get_as(&format!("{}/attempts", web.url), As::Basic("agent")).await;
    assert_eq!(basic.status(), 401, "the API takes only Bearer");

    // One attempt: its history and lookups, the same at both addresses.
    let (status, one) = get(&web, &format!("/attempts/{}", s.op3.id), Some("app")).await;
    assert_eq!(status, 200, "{one}");
    assert_eq!(one["attempt"]["state"], "EN_REVISION");
    let causes: Vec<&str> = one["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["to_state"].as_str().unwrap())
        .collect();
    assert_eq!(
        causes,
        ["PENDIENTE", "EN_PROCESO", "DESCONOCIDO", "EN_REVISION"]
    );
    assert_eq!(one["checks"].as_array().unwrap().len(), 1);
    assert_eq!(one["checks"][0]["lookup_result"], "failed");
    let (_, same) = get(&web, &format!("/charges/{}", s.op3.id), Some("app")).await;
    assert_eq!(same, one);
    let (status, refund) = get(&web, &format!("/attempts/{}", s.refund.id), Some("app")).await;
    assert_eq!(status, 200);
    assert_eq!(refund["refund_of"]["id"], id(&s.op1));
    let (status, body) = get(&web, "/attempts/nope", Some("app")).await;
    assert_refused(status, &body, 400, "attempt_id");
    let (status, _) = get(&web, &format!("/attempts/{}", s.op3.id), Some("ana")).await;
    assert_eq!(status, 403);

    web.stop().await;
    s.db.drop_db().await;
}

async fn page(
    web: &Web,
    path: &str,
    who: Option<&str>,
) -> (u16, String, reqwest::header::HeaderMap) {
    let mut req = reqwest::Client::new().get(format!("{}{path}", web.url));
    if let Some(who) = who {
        req = req.basic_auth(who, Some(secret(who)));
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (status, resp.text().await.unwrap(), headers)
}

async fn the_pages_need_a_key_escape_everything_and_show_the_pause(b: Backend) {
    let s = seed(b).await;
    let web = web_on(&s.db.store).await;

    let (status, _, headers) = page(&web, "/operator/attempts", None).await;
    assert_eq!(status, 401);
    assert!(
        headers["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Basic"),
        "the browser asks for a sign-in"
    );
    let (status, _, _) = page(&web, "/operator/attempts", Some("ana")).await;
    assert_eq!(status, 403, "finance:read alone may not list every attempt");
    let (status, _, _) = page(
        &web,
        &format!("/operator/attempts/{}", s.op3.id),
        Some("ana"),
    )
    .await;
    assert_eq!(status, 403);

    let (status, html, headers) = page(&web, "/operator/attempts", Some("agent")).await;
    assert_eq!(status, 200);
    assert_eq!(headers["cache-control"], "no-store");
    for a in s.newest_first() {
        assert!(
            html.contains(&format!("data-attempt=\"{a}\"")),
            "{a} listed"
        );
    }
    assert!(html.contains("op-4 &lt;b&gt;&amp;&quot;x&quot;"), "{html}");
    assert!(!html.contains("<b>&\"x\""), "the order id is escaped");
    assert!(!html.contains("id=\"paused\""), "not paused yet");

    // A search that names a bad value says which, and lists nothing.
    let (status, html, _) = page(&web, "/operator/attempts?state=nope", Some("agent")).await;
    assert_eq!(status, 400);
    assert!(
        html.contains("id=\"problem\"") && html.contains("invalid state"),
        "{html}"
    );

    // Pages of 3 keep the filters in their Next link.
    let (_, html, _) = page(
        &web,
        "/operator/attempts?kind=charge&limit=3",
        Some("agent"),
    )
    .await;
    let at = html.find("id=\"next\" href=\"").expect("a next page") + 16;
    let next = html[at..].split('"').next().unwrap().replace("&amp;", "&");
    assert!(
        next.starts_with("/operator/attempts?kind=charge&limit=3&cursor="),
        "{next}"
    );
    let (status, html, _) = page(&web, &next, Some("agent")).await;
    assert_eq!(status, 200);
    assert_eq!(html.matches("<tr data-attempt=").count(), 3);
    assert!(!html.contains(&s.refund.id.to_string()), "charges only");

    // The detail: facts, history, lookups; escaped.
    let (status, html, _) = page(
        &web,
        &format!("/operator/attempts/{}", s.op3.id),
        Some("agent"),
    )
    .await;
    assert_eq!(status, 200);
    assert!(html.contains("<td id=\"state\">EN_REVISION</td>"), "{html}");
    assert!(html.contains("id=\"history\"") && html.contains("id=\"checks\""));
    assert!(
        html.contains("worker:test") && html.contains("HTTP 503"),
        "{html}"
    );
    let (_, html, _) = page(
        &web,
        &format!("/operator/attempts/{}", s.op4.id),
        Some("agent"),
    )
    .await;
    assert!(html.contains("op-4 &lt;b&gt;&amp;&quot;x&quot;") && !html.contains("<b>&\""));
    assert!(
        html.contains("pm_card_visa"),
        "the gateway's token, not card data"
    );
    let (status, _, _) = page(&web, "/operator/attempts/nope", Some("agent")).await;
    assert_eq!(status, 400);
    let (status, _, _) = page(
        &web,
        &format!("/operator/attempts/{}", uuid::Uuid::new_v4()),
        Some("agent"),
    )
    .await;
    assert_eq!(status, 404);

    // The incident switch: its banner on every operator page.
    s.db.store
        .set_sending_paused(true, "api:ana", Some("INC-9 <gateway>"))
        .await
        .unwrap();
    for path in [
        "/operator/attempts".to_owned(),
        "/operator/attempts?order_id=op-3".to_owned(),
        format!("/operator/attempts/{}", s.op3.id),
    ] {
        let (_, html, _) = page(&web, &path, Some("agent")).await;
        assert!(
            html.contains("id=\"paused\"") && html.contains("INC-9 &lt;gateway&gt;"),
            "the banner on {path}: {html}"
        );
    }
    web.stop().await;
    s.db.drop_db().await;
}
