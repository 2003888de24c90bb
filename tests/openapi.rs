//! The OpenAPI document (`GET /openapi.json`, `cobro openapi`) names
//! exactly the routes the web process serves: every `.route(…)` of
//! `src/web/` (read from the source, with its methods) is in the document,
//! and the document names no other; and the running web process answers
//! every (path, method) the document names, and 405 to the methods it
//! does not name; a charge, its attempt, a refusal, the health check, a
//! search, finance's queue and summary and a cancel answer with the fields
//! their schemas name; and every JSON request body
//! the document names is the one its handler reads (its properties taken,
//! each required one refused when missing, any other refused), on both
//! backends.

#[macro_use]
mod common;

use std::collections::BTreeSet;
use std::path::Path;

use cobro::store::Backend;
use cobro::webhook::{Scheme, Verifier};
use common::*;
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

/// Every (path, method) that a `.route(path, …)` in `src/web/` mounts:
/// the path is a string literal or a `const` of `src/web/`; the methods
/// are the `get(`, `post(`, `.put(`, … calls inside the route's arguments.
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
        while let Some(at) = rest.find(".route(") {
            let args = balanced(&rest[at + ".route(".len()..]);
            rest = &rest[at + ".route(".len() + args.len()..];
            let first = args.split(',').next().unwrap().trim();
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
    panic!("unbalanced .route(")
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
fn concrete(path: &str) -> String {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_process_answers_what_the_document_names_and_nothing_else() {
    let db = TestDb::new(Backend::Sqlite).await;
    let v = Verifier::from_env_value(Scheme::StandardWebhooks, &test_secret()).unwrap();
    let web = start_web(&db.store, v).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
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
    let served = http
        .get(format!("{}/openapi.json", web.url))
        .send()
        .await
        .unwrap();
    assert_eq!(served.status(), 200);
    assert!(
        served.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
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
    let attempt: Value = http
        .get(format!(
            "{}/charges/{}",
            web.url,
            created["attempt_id"].as_str().unwrap()
        ))
        .bearer_auth(secret("app"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
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
    let health: Value = http
        .get(format!("{}/health", web.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
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
        let cancelled: Value = http
            .post(format!("{}/orders/doc-1/cancel", web.url))
            .bearer_auth(secret("app"))
            .json(&serde_json::json!({"reason": "customer_request"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        fits(&doc, "CancelAnswer", &cancelled);
        assert_eq!(cancelled["detail"].as_str(), detail, "{cancelled}");
    }
    web.stop().await;
    db.drop_db().await;
}

/// `value` has every field the schema `name` requires, and none it does not
/// name.
fn fits(doc: &Value, name: &str, value: &Value) {
    let schema = serde_json::json!({ "$ref": format!("#/components/schemas/{name}") });
    fits_schema(doc, &schema, value, name);
}

/// `value` has every field `schema` requires, and none it does not name
/// (through its `$ref`s and the parts of an `allOf`).
fn fits_schema(doc: &Value, schema: &Value, value: &Value, what: &str) {
    let (mut props, mut required) = (BTreeSet::new(), BTreeSet::new());
    shape(doc, schema, &mut props, &mut required);
    assert!(!props.is_empty(), "{what}: {schema} names no field");
    let fields = value
        .as_object()
        .unwrap_or_else(|| panic!("{what}: {value}"));
    for k in fields.keys() {
        assert!(
            props.contains(k),
            "{what}: the answer has {k:?}, the schema does not"
        );
    }
    for k in &required {
        assert!(
            fields.contains_key(k),
            "{what}: the schema requires {k:?}, the answer lacks it: {value}"
        );
    }
}

/// Every property `schema` names and every one it requires.
fn shape(
    doc: &Value,
    schema: &Value,
    props: &mut BTreeSet<String>,
    required: &mut BTreeSet<String>,
) {
    if let Some(name) = schema["$ref"]
        .as_str()
        .and_then(|r| r.strip_prefix("#/components/schemas/"))
    {
        let target = &doc["components"]["schemas"][name];
        assert!(target.is_object(), "no schema {name}");
        return shape(doc, target, props, required);
    }
    for part in schema["allOf"].as_array().into_iter().flatten() {
        shape(doc, part, props, required);
    }
    props.extend(
        schema["properties"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k.clone()),
    );
    required.extend(
        schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|k| k.as_str().unwrap().to_owned()),
    );
}

on_both_backends!(every_json_request_body_is_the_one_its_handler_reads);

/// Each JSON request body the served document names, posted to the running
/// web process (with a key of the route's scope): the body of every
/// property of the schema (each its `example`, or its one `enum` value) is
/// taken, and so is the body of only its `required` ones (the answer is
/// 2xx, or 404/409 about the resource: the body was read, and the answer
/// has the fields its documented schema names); without one required
/// property it is refused naming that property; with a property the schema
/// does not name, refused naming it (every JSON route refuses unknown
/// fields). A `oneOf` is checked one alternative at a time, and a property
/// of another alternative is refused as unknown.
async fn every_json_request_body_is_the_one_its_handler_reads(backend: Backend) {
    let db = TestDb::new(backend).await;
    let v = Verifier::from_env_value(Scheme::StandardWebhooks, &test_secret()).unwrap();
    let web = start_web(&db.store, v).await;
    let http = reqwest::Client::new();
    let doc: Value = http
        .get(format!("{}/openapi.json", web.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut checked = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let Some(name) = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
                .as_str()
                .and_then(|r| r.strip_prefix("#/components/schemas/"))
            else {
                continue;
            };
            assert_eq!(method, "post", "{path}: a JSON body on {method}");
            let route = Route {
                url: format!("{}{}", web.url, concrete(path)),
                key: key_for(op),
                keyed: op["parameters"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|p| p["in"] == "header" && p["name"] == "Idempotency-Key"),
                op,
            };
            let schema = &doc["components"]["schemas"][name];
            let alternatives: Vec<&Value> = match schema["oneOf"].as_array() {
                Some(alts) => alts.iter().collect(),
                None => vec![schema],
            };
            let every_name: BTreeSet<&str> = alternatives
                .iter()
                .flat_map(|alt| alt["properties"].as_object().unwrap().keys())
                .map(String::as_str)
                .collect();
            let mut taken = Vec::new();
            for alt in &alternatives {
                let what = format!("{path} ({name})");
                let props = alt["properties"].as_object().unwrap();
                let required: Vec<&str> = alt["required"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|r| r.as_str().unwrap())
                    .collect();
                let full: serde_json::Map<String, Value> = props
                    .iter()
                    .map(|(k, p)| (k.clone(), example(&what, k, p)))
                    .collect();
                let minimal: serde_json::Map<String, Value> = full
                    .iter()
                    .filter(|(k, _)| required.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                for body in [&full, &minimal] {
                    let (status, answer) = route.post(&http, body).await;
                    assert!(
                        status.is_success() || status == 404 || status == 409,
                        "{what}: the body {body:?} built from the schema is refused: \
                         {status} {answer}"
                    );
                    fits_documented(&doc, op, status, &answer, &what);
                    taken.push(status.as_u16());
                }
                for gone in &required {
                    let mut body = full.clone();
                    body.remove(*gone);
                    let (status, answer) = route.post(&http, &body).await;
                    assert!(
                        status == 422 || status == 400,
                        "{what}: without the required {gone:?}, answered {status} {answer}"
                    );
                    assert!(
                        answer["field"] == *gone
                            || answer["error"]
                                .as_str()
                                .is_some_and(|e| e.contains(&format!("`{gone}`"))),
                        "{what}: the refusal without {gone:?} does not name it: {answer}"
                    );
                }
                let others = every_name.iter().filter(|n| !props.contains_key(**n));
                for extra in others.copied().chain(["not_a_field_of_this_route"]) {
                    let mut body = full.clone();
                    body.insert(extra.to_owned(), Value::from("x"));
                    let (status, answer) = route.post(&http, &body).await;
                    assert_eq!(
                        (status.as_u16(), &answer["field"]),
                        (422, &Value::from(extra)),
                        "{what}: a body with {extra:?} is not refused naming it: {answer}"
                    );
                }
            }
            checked.push(format!("{path} ({name}): taken with {taken:?}"));
        }
    }
    // Every JSON body of the API: a document without them would pass.
    assert!(checked.len() >= 10, "only {checked:?}");
    println!("{}", checked.join("\n"));
    web.stop().await;
    db.drop_db().await;
}

/// One documented route that takes a JSON body.
struct Route<'a> {
    url: String,
    key: &'static str,
    /// It takes an `Idempotency-Key` header (a new one each time).
    keyed: bool,
    op: &'a Value,
}

impl Route<'_> {
    async fn post(
        &self,
        http: &reqwest::Client,
        body: &serde_json::Map<String, Value>,
    ) -> (reqwest::StatusCode, Value) {
        let mut req = http
            .post(&self.url)
            .bearer_auth(secret(self.key))
            .json(body);
        if self.keyed {
            req = req.header("Idempotency-Key", uuid::Uuid::new_v4().to_string());
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        let answer = serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("{}: {status} is not JSON: {text}", self.op["operationId"]));
        (status, answer)
    }
}

/// The test key with every scope the operation's `api_key` names.
fn key_for(op: &Value) -> &'static str {
    let scopes: Vec<&str> = op["security"][0]["api_key"]
        .as_array()
        .unwrap_or_else(|| panic!("{}: no api_key scope", op["operationId"]))
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    TEST_KEYS
        .iter()
        .find(|(_, has)| scopes.iter().all(|s| has.split('+').any(|h| h == *s)))
        .unwrap_or_else(|| panic!("no test key has {scopes:?}"))
        .0
}

/// A property's value as the schema gives it: its example, or its only
/// allowed value.
fn example(what: &str, name: &str, prop: &Value) -> Value {
    if let Some(v) = prop.get("example") {
        return v.clone();
    }
    match prop["enum"].as_array().map(Vec::as_slice) {
        Some([one]) => one.clone(),
        _ => panic!("{what}: the property {name:?} has no example"),
    }
}

/// The answer fits the schema documented for its status on `op` (when
/// that status has a JSON schema): the status is documented at all.
fn fits_documented(
    doc: &Value,
    op: &Value,
    status: reqwest::StatusCode,
    answer: &Value,
    what: &str,
) {
    let documented = &op["responses"][status.as_str()];
    assert!(
        documented.is_object(),
        "{what}: answered {status}, which the document does not name"
    );
    let schema = &documented["content"]["application/json"]["schema"];
    if !schema.is_null() {
        fits_schema(doc, schema, answer, what);
    }
}
