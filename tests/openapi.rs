//! The OpenAPI document (`GET /openapi.json`, `cobro openapi`) names
//! exactly the routes the web process serves: every `.route(…)` and
//! `.guarded(…)` of `src/web/` (read from the source, with its methods) is
//! in the document,
//! and the document names no other; and the running web process answers
//! every (path, method) the document names, and 405 to the methods it
//! does not name; a charge, its attempt, a refusal, the health check, a
//! search, finance's queue and summary and a cancel answer with the fields
//! their schemas name; and every JSON request body
//! the document names is the one its handler reads (its properties taken,
//! each required one refused when missing, any other refused), on both
//! backends. The request bodies' test is `openapi/bodies.rs`; checking an
//! answer against its schema, `openapi/schema.rs`.

#[macro_use]
mod common;
#[path = "openapi/bodies.rs"]
mod bodies;
#[path = "openapi/schema.rs"]
mod schema;

use std::collections::BTreeSet;
use std::path::Path;

use cobro::store::Backend;
use common::*;
use schema::fits;
use serde_json::Value;

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

type Routes = BTreeSet<(String, String)>;

/// Every (path, method) of the document.
fn documented() -> Routes {
    let doc: Value = serde_json::from_str(&cobro::web::openapi_document()).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["info"]["title"], "cobro");
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
    let mut out = Routes::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if METHODS.contains(&method.as_str()) {
                out.insert((path.clone(), method.clone()));
            }
        }
    }
    out
}

/// Every (path, method) that a `.route(path, …)` or a `.guarded(path, …)`
/// (a route behind its guard, `web::access`) in `src/web/` mounts: the
/// path is a string literal or a `const` of `src/web/`; the methods are
/// the `get(`, `post(`, `.put(`, … calls inside the route's arguments.
fn routed() -> Routes {
    let mut files = Vec::new();
    rust_files(
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src/web")),
        &mut files,
    );
    let sources: Vec<(String, String)> = files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            // Comments do not mount routes.
            let code: Vec<&str> = text
                .lines()
                .map(|l| l.split("//").next().unwrap_or(""))
                .collect();
            (f.display().to_string(), code.join("\n"))
        })
        .collect();
    let mut out = Routes::new();
    for (file, code) in &sources {
        let mut rest = code.as_str();
        while let Some((at, call)) = [".route(", ".guarded("]
            .into_iter()
            .filter_map(|call| Some((rest.find(call)?, call)))
            .min()
        {
            let args = balanced(&rest[at + call.len()..]);
            rest = &rest[at + call.len() + args.len()..];
            let first = args.split(',').next().unwrap().trim();
            if call == ".route(" && first == "path" && file.ends_with("/access.rs") {
                // `Guarded::guarded` itself: it mounts the path each
                // `.guarded(` call names, read there.
                continue;
            }
            let path = if let Some(lit) = first.strip_prefix('"') {
                lit.trim_end_matches('"').to_owned()
            } else {
                let name = first.rsplit("::").next().unwrap();
                constant(&sources, name)
                    .unwrap_or_else(|| panic!("{file}: no const {name} for a route's path"))
            };
            assert!(
                !args.contains("any("),
                "{file}: {path} is routed for any method; the document must list them"
            );
            let mut methods = 0;
            for m in METHODS {
                if calls(args, m) {
                    out.insert((path.clone(), m.to_owned()));
                    methods += 1;
                }
            }
            assert!(methods > 0, "{file}: no method found for the route {path}");
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The text up to the parenthesis that closes the one just opened.
fn balanced(s: &str) -> &str {
    let mut depth = 1;
    let mut in_str = false;
    for (i, c) in s.char_indices() {
        match c {
            '"' => in_str = !in_str,
            '(' if !in_str => depth += 1,
            ')' if !in_str => {
                depth -= 1;
                if depth == 0 {
                    return &s[..i];
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced .route( or .guarded(")
}

/// Whether `args` calls `method(` as a word (`get(`, `.get(`), not as the
/// end of another name (`budget(`).
fn calls(args: &str, method: &str) -> bool {
    let pat = format!("{method}(");
    args.match_indices(&pat).any(|(i, _)| {
        !args[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// The value of `const NAME: &str = "…";` in one of the sources.
fn constant(sources: &[(String, String)], name: &str) -> Option<String> {
    let decl = format!("const {name}: &str = \"");
    sources.iter().find_map(|(_, code)| {
        let at = code.find(&decl)? + decl.len();
        Some(code[at..].split('"').next()?.to_owned())
    })
}

#[test]
fn the_document_names_exactly_the_routes_of_the_router() {
    let doc = documented();
    let src = routed();
    // The scanner found the router: a scanner that found nothing would
    // make the comparison below pass on an empty document.
    assert!(
        src.len() >= 30,
        "only {} routes read from src/web",
        src.len()
    );
    assert!(src.contains(&("/charges".into(), "post".into())));
    assert!(src.contains(&("/control/pause".into(), "get".into())));
    let missing: Vec<_> = src.difference(&doc).collect();
    let extra: Vec<_> = doc.difference(&src).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "routes of the router missing from the OpenAPI document: {missing:?}; \
         routes in the document the router does not serve: {extra:?}"
    );
    println!("{} routes, in the router and the document", src.len());
}

/// `{name}` → a value its handler can parse (the route must match, whatever
/// the handler answers after).
pub(crate) fn concrete(path: &str) -> String {
    path.split('/')
        .map(|seg| match seg {
            "{id}" if path.starts_with("/finance/cases/") || path.contains("/api/cases/") => "1",
            s if s.starts_with('{') => "00000000-0000-4000-8000-000000000000",
            s => s,
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// A route's 403 (shared by the routes of one scope) names the scope its
/// `security` asks for.
#[test]
fn each_403_names_the_scope_the_route_needs() {
    let doc: Value = serde_json::from_str(&cobro::web::openapi_document()).unwrap();
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let Some(forbidden) = op["responses"]["403"]["description"].as_str() else {
                continue;
            };
            let needs: Vec<&str> = op["security"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|s| s.as_object().unwrap().values())
                .flat_map(|scopes| scopes.as_array().unwrap())
                .map(|s| s.as_str().unwrap())
                .collect();
            assert!(!needs.is_empty(), "{method} {path}: a 403 but no scope");
            for scope in &needs {
                assert!(
                    forbidden.contains(&format!("`{scope}`")),
                    "{method} {path} needs {scope}, its 403 says: {forbidden}"
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 25, "only {checked} routes with a 403");
}

/// The test key that holds one of `scopes` (`holds`), or one that holds
/// none of them (`!holds`).
fn key_that(holds: bool, scopes: &[&str]) -> &'static str {
    TEST_KEYS
        .iter()
        .find(|(_, has)| has.split('+').any(|s| scopes.contains(&s)) == holds)
        .map(|(name, _)| *name)
        .unwrap_or_else(|| panic!("no test key with holds={holds} for {scopes:?}"))
}

/// Every operation the document guards is guarded by the running router
/// exactly as its `security` says: no credential → 401; a key without its
/// scope, by each scheme it names → 403 naming the scope; a key with the
/// scope, by a scheme it does not name → 401, and by each one it names →
/// past the guard (neither 401 nor 403).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_guards_each_operation_as_the_document_says() {
    let db = TestDb::new(Backend::Sqlite).await;
    let web = web_on(&db.store).await;
    let http = no_redirects();
    let doc: Value = serde_json::from_str(&cobro::web::openapi_document()).unwrap();
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if !METHODS.contains(&method.as_str()) {
                continue;
            }
            // scheme → the scopes it needs (any one of them).
            let mut schemes = BTreeSet::new();
            let mut scopes = BTreeSet::new();
            for requirement in op["security"].as_array().unwrap() {
                for (scheme, needs) in requirement.as_object().unwrap() {
                    schemes.insert(scheme.as_str());
                    scopes.extend(
                        needs
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|s| s.as_str().unwrap()),
                    );
                }
            }
            if schemes.is_empty() {
                continue; // `security: [{}]`: no credential
            }
            let scopes: Vec<&str> = scopes.into_iter().collect();
            let name = format!("{method} {path}");
            let send = |scheme: Option<&str>, key: &str| {
                let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
                let req = http
                    .request(m, format!("{}{}", web.url, concrete(path)))
                    .header("content-type", "application/json")
                    .body("{}");
                let req = match scheme {
                    None => req,
                    Some("api_key") => req.bearer_auth(secret(key)),
                    Some("sign_in") => req.basic_auth(key, Some(secret(key))),
                    Some(other) => panic!("{name}: unknown scheme {other}"),
                };
                async move {
                    let resp = req.send().await.unwrap();
                    (resp.status(), resp.text().await.unwrap())
                }
            };
            let (status, _) = send(None, "").await;
            assert_eq!(status, 401, "{name} without a credential");
            let (holder, outsider) = (key_that(true, &scopes), key_that(false, &scopes));
            for scheme in ["api_key", "sign_in"] {
                let (status, body) = send(Some(scheme), outsider).await;
                let (held, held_body) = send(Some(scheme), holder).await;
                if schemes.contains(scheme) {
                    assert_eq!(status, 403, "{name}: {outsider} by {scheme}: {body}");
                    for scope in &scopes {
                        assert!(body.contains(scope), "{name}: 403 naming {scope}: {body}");
                    }
                    assert!(
                        held != 401 && held != 403,
                        "{name}: {holder} by {scheme} answered {held}: {held_body}"
                    );
                } else {
                    assert_eq!(
                        held, 401,
                        "{name}: {holder} by {scheme}, not taken: {held_body}"
                    );
                }
            }
            checked += 1;
        }
    }
    assert!(checked >= 30, "only {checked} guarded operations");
    println!("{checked} guarded operations, each guarded as documented");
    web.stop().await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_process_answers_what_the_document_names_and_nothing_else() {
    let db = TestDb::new(Backend::Sqlite).await;
    let web = web_on(&db.store).await;
    let http = no_redirects();
    let doc = documented();
    let paths: BTreeSet<&String> = doc.iter().map(|(p, _)| p).collect();
    for path in paths {
        let url = format!("{}{}", web.url, concrete(path));
        for m in METHODS {
            let method = reqwest::Method::from_bytes(m.to_uppercase().as_bytes()).unwrap();
            let status = http
                .request(method, &url)
                .header("content-type", "application/json")
                .body("{}")
                .send()
                .await
                .unwrap()
                .status();
            if doc.contains(&(path.clone(), m.to_owned())) {
                assert!(
                    status != 404 && status != 405,
                    "{m} {path}: documented, but the web process answers {status}"
                );
            } else {
                assert_eq!(status, 405, "{m} {path}: not documented, but answered");
            }
        }
    }
    // Served without a credential, the same document `cobro openapi` prints.
    let served = get_as(&format!("{}/openapi.json", web.url), As::Nobody).await;
    assert_eq!(served.status(), 200);
    assert_content_type(&served, "application/json");
    assert_eq!(served.text().await.unwrap(), cobro::web::openapi_document());

    // The answers have the documented fields: a charge, its attempt, a
    // refusal, the health check.
    let doc: Value = serde_json::from_str(&cobro::web::openapi_document()).unwrap();
    let created = http
        .post(format!("{}/charges", web.url))
        .bearer_auth(secret("app"))
        .header("Idempotency-Key", "0b6f2c1e-9a4d-4e7b-8c3f-5d2a1b0e9f87")
        .json(&serde_json::json!({
            "order_id": "doc-1", "amount_minor": 1999, "currency": "USD",
            "payment_method": "pm_card_visa"
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let created: Value = created.json().await.unwrap();
    fits(&doc, "ChargeCreated", &created);
    let attempt: Value = get_json(
        &format!(
            "{}/charges/{}",
            web.url,
            created["attempt_id"].as_str().unwrap()
        ),
        As::Bearer("app"),
    )
    .await;
    fits(&doc, "Detail", &attempt);
    fits(&doc, "Attempt", &attempt["attempt"]);
    assert_eq!(attempt["attempt"]["state"], "PENDIENTE");
    let refused = http
        .post(format!("{}/charges", web.url))
        .bearer_auth(secret("app"))
        .header("Idempotency-Key", "0b6f2c1e-9a4d-4e7b-8c3f-5d2a1b0e9f88")
        .json(&serde_json::json!({"order_id": "doc-2", "currency": "USD"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 422);
    fits(&doc, "ErrorBody", &refused.json().await.unwrap());
    let health: Value = get_json(&format!("{}/health", web.url), As::Nobody).await;
    fits(&doc, "Health", &health);

    // The typed answers: a search, finance's queue and summary, a cancel
    // and a cancel with nothing left (with `detail`).
    let get = |path: &str, key: &str| {
        let req = http
            .get(format!("{}{path}", web.url))
            .bearer_auth(secret(key));
        async move {
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status(), 200);
            resp.json::<Value>().await.unwrap()
        }
    };
    let page = get("/attempts?order_id=doc-1", "app").await;
    fits(&doc, "AttemptsPage", &page);
    fits(&doc, "Attempt", &page["items"][0]);
    fits(
        &doc,
        "EscalationsPage",
        &get("/finance/api/escalations", "ana").await,
    );
    fits(&doc, "Summary", &get("/finance/api/summary", "ana").await);
    for detail in [None, Some("nothing left to cancel")] {
        let cancelled: Value = send_json(
            http.post(format!("{}/orders/doc-1/cancel", web.url))
                .bearer_auth(secret("app"))
                .json(&serde_json::json!({"reason": "customer_request"})),
        )
        .await;
        fits(&doc, "CancelAnswer", &cancelled);
        assert_eq!(cancelled["detail"].as_str(), detail, "{cancelled}");
    }
    web.stop().await;
    db.drop_db().await;
}
