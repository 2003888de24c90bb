//! Every JSON request body the document names is the one its handler
//! reads, on both backends.

use std::collections::BTreeSet;

use serde_json::Value;

use super::common::{self, *};
use super::concrete;
use super::schema::*;

on_both_dbs!(every_json_request_body_is_the_one_its_handler_reads,);

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
async fn every_json_request_body_is_the_one_its_handler_reads(db: &TestDb) {
    let web = web_on(&db.store).await;
    let http = reqwest::Client::new();
    let doc: Value = get_json(&format!("{}/openapi.json", web.url), As::Nobody).await;
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
