//! What every HTTP listener of cobro stands on: the hardened server loop
//! ([`serve`]), API keys with scopes ([`keys`]) and the check of each
//! request against them ([`auth`]). The web process and
//! the worker's metrics endpoint both use them; nothing here knows a route.
//!
//! Invariant: no listener runs without header-read, request and body
//! timeouts and a connection limit; no guarded route runs its handler
//! before the caller is authenticated and holds the route's scope; a JSON
//! route reads no body that is not declared `application/json`.

pub mod admit;
pub mod auth;
pub mod headers;
pub mod keys;
pub mod serve;

use axum::Json;
use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// A JSON error body: `{"error": message, "field": field}`.
pub fn error(status: StatusCode, field: Option<&str>, message: impl Into<String>) -> Response {
    let mut body = json!({ "error": message.into() });
    if let Some(f) = field {
        body["field"] = json!(f);
    }
    (status, Json(body)).into_response()
}

/// Whether `headers` declare a JSON body (`application/json`, any
/// parameters, any case).
pub fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|ct| ct.split(';').next())
        .is_some_and(|ct| ct.trim().eq_ignore_ascii_case("application/json"))
}

fn not_json() -> Response {
    error(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        None,
        "Content-Type must be application/json",
    )
}

/// Lets a request through only with `Content-Type: application/json`, so
/// a browser form posted from another site (`text/plain`, urlencoded,
/// multipart: no CORS preflight) never reaches a JSON handler: 415. For
/// the routes that take a body, even an empty one.
pub async fn json_only(req: Request, next: Next) -> Response {
    if !is_json(req.headers()) {
        return not_json();
    }
    next.run(req).await
}

/// For a POST that takes no body (`/control/resume`, finance's retry): an
/// empty body with no `Content-Type` (what `curl -X POST` sends) or a JSON
/// one; any other declared type is 415, as on every JSON route. The
/// handler still refuses a JSON body with fields ([`no_fields`]).
pub async fn json_or_nothing(req: Request, next: Next) -> Response {
    if req.headers().contains_key(header::CONTENT_TYPE) && !is_json(req.headers()) {
        return not_json();
    }
    next.run(req).await
}

/// A bodiless route's body: empty, `{}` or `null` pass; anything else is
/// refused (400 not JSON, 422 naming the first field: the route takes
/// none, so a field would be dropped in silence).
pub fn no_fields(body: &[u8]) -> Result<(), Box<Response>> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        Box::new(error(
            StatusCode::BAD_REQUEST,
            None,
            format!("the body is not JSON: {e}"),
        ))
    })?;
    match v {
        Value::Null => Ok(()),
        Value::Object(o) => match o.keys().next() {
            None => Ok(()),
            Some(k) => {
                let name = crate::domain::text::stored(k, crate::domain::text::Kind::Id);
                Err(Box::new(error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    Some(&name),
                    format!("unknown field {name:?}: this route takes no body"),
                )))
            }
        },
        other => Err(Box::new(error(
            StatusCode::UNPROCESSABLE_ENTITY,
            None,
            format!("this route takes no body; got {}", kind_of(&other)),
        ))),
    }
}

/// The JSON type a field must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    /// A string; the words after "must be a string" (what it holds).
    Text(&'static str),
    /// A number (whether it is whole is the route's to check, with its
    /// own words); the words after "must be an integer".
    Integer(&'static str),
}

/// What a person calls the JSON type of `v`, with its article.
pub fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "true or false",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a decimal number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Every field of `spec` that `v` has (and is not `null`) has its type, or
/// the 422 naming the first that does not, what it must be and what it
/// got: `{"error": "amount_minor must be an integer (minor units, …); got
/// a string", "field": "amount_minor"}`. Missing fields are the route's
/// to refuse ("is required"); a body that is not an object is left to it.
pub fn typed(v: &Value, spec: &[(&str, Type)]) -> Result<(), Box<Response>> {
    for (field, want) in spec {
        let Some(got) = v.get(field).filter(|g| !g.is_null()) else {
            continue;
        };
        let (ok, expected, hint) = match want {
            Type::Text(hint) => (got.is_string(), "a string", *hint),
            Type::Integer(hint) => (got.is_number(), "an integer", *hint),
        };
        if !ok {
            let hint = if hint.is_empty() {
                String::new()
            } else {
                format!(" ({hint})")
            };
            return Err(Box::new(error(
                StatusCode::UNPROCESSABLE_ENTITY,
                Some(field),
                format!("{field} must be {expected}{hint}; got {}", kind_of(got)),
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrong_type_names_the_field_what_it_must_be_and_what_came() {
        let spec = [
            (
                "amount_minor",
                Type::Integer("minor units, e.g. 1999 for 19.99 USD"),
            ),
            ("order_id", Type::Text("")),
        ];
        for (body, refused) in [
            (json!({"amount_minor": 1999, "order_id": "o-1"}), None),
            (json!({"amount_minor": 19.99}), None),
            (json!({"amount_minor": null, "order_id": null}), None),
            (json!({}), None),
            (
                json!({"amount_minor": "1999"}),
                Some(
                    "amount_minor must be an integer (minor units, e.g. 1999 for 19.99 USD); got a string",
                ),
            ),
            (
                json!({"amount_minor": 1, "order_id": 7}),
                Some("order_id must be a string; got an integer"),
            ),
            (
                json!({"order_id": ["o-1"]}),
                Some("order_id must be a string; got a list"),
            ),
            (
                json!({"order_id": true}),
                Some("order_id must be a string; got true or false"),
            ),
        ] {
            let got = typed(&body, &spec).err().map(|r| {
                let r = *r;
                assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
                r
            });
            assert_eq!(got.is_some(), refused.is_some(), "{body}");
            if let (Some(resp), Some(want)) = (got, refused) {
                let bytes =
                    futures::executor::block_on(axum::body::to_bytes(resp.into_body(), usize::MAX))
                        .unwrap();
                let v: Value = serde_json::from_slice(&bytes).unwrap();
                assert_eq!(v["error"], want);
                assert_eq!(v["field"], want.split(' ').next().unwrap());
            }
        }
    }

    #[test]
    fn a_bodiless_route_takes_nothing_empty_or_an_empty_object() {
        for ok in [&b""[..], b"  \n", b"{}", b"null"] {
            assert!(no_fields(ok).is_ok(), "{:?}", String::from_utf8_lossy(ok));
        }
        let status = |b: &[u8]| no_fields(b).err().map(|r| r.status().as_u16());
        assert_eq!(status(br#"{"reason": "x"}"#), Some(422));
        assert_eq!(status(b"[1]"), Some(422));
        assert_eq!(status(b"reason=x"), Some(400));
    }
}
