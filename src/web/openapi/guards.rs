//! Each guarded operation's credential and scope, written into the
//! document from [`access::GUARDED`], the table the routers build their
//! guards from.

use utoipa::openapi::RefOr;
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::SecurityRequirement;
use utoipa::{IntoResponses, Modify};

use super::ErrorBody;
use crate::web::access::{self, Credential, Rule};

/// The 401 of every route that takes an API key or the browser's sign-in.
const UNAUTHORIZED: &str =
    "No credential, a wrong one, or the wrong scheme (`WWW-Authenticate` says which).";

/// The 401 of every guarded route (the 403 is built from it,
/// [`Guards`]).
#[derive(IntoResponses)]
#[response(status = 401, description = UNAUTHORIZED)]
#[expect(dead_code, reason = "only its description and schema are used")]
struct Unauthorized(ErrorBody);

/// Each guarded operation's credential and scope, written from
/// [`access::GUARDED`] (the table the routers build their guards from):
/// its `security`, the sentence of its description that says what it
/// needs, its 401, and its 403 naming the scope. An operation of a guarded
/// path that states any of these itself is a mistake: the document is not
/// built.
pub(super) struct Guards;

impl Modify for Guards {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        for rule in access::GUARDED {
            let Some(item) = doc.paths.paths.get_mut(rule.path) else {
                panic!(
                    "{} is in web::access::GUARDED but not in the document",
                    rule.path
                );
            };
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.options,
                &mut item.head,
                &mut item.patch,
                &mut item.trace,
            ];
            for op in operations.into_iter().flatten() {
                guard(op, rule);
            }
        }
    }
}

fn guard(op: &mut Operation, rule: &Rule) {
    let scope = rule.scope.as_str();
    let name = op.operation_id.clone().unwrap_or_else(|| rule.path.into());
    assert!(
        op.security.is_none(),
        "{name}: its security is web::access::GUARDED's, not its #[utoipa::path]'s"
    );
    let (schemes, needs): (&[&str], _) = match rule.credential {
        Credential::ApiKey => (
            &["api_key"],
            format!("Needs an API key with `{scope}` (Bearer)."),
        ),
        Credential::PageOrKey => (
            &["api_key", "sign_in"],
            format!("Needs `{scope}`: the browser's sign-in (Basic) or an API key (Bearer)."),
        ),
        Credential::Form => (
            &["sign_in"],
            format!(
                "Needs `{scope}` by the browser's sign-in (Basic), the page's form token \
                 (of this sign-in, not expired) and a same-origin request."
            ),
        ),
    };
    op.security = Some(
        schemes
            .iter()
            .map(|s| SecurityRequirement::new(*s, [scope]))
            .collect(),
    );
    op.description = Some(match op.description.take() {
        Some(what) => format!("{what} {needs}"),
        None => needs,
    });
    let Some(RefOr::T(unauthorized)) = Unauthorized::responses().remove("401") else {
        unreachable!("Unauthorized is a 401");
    };
    let forbidden = match rule.credential {
        Credential::Form => utoipa::openapi::response::Response::new(format!(
            "The key lacks `{scope}`, the request is not same-origin, or the form token is \
             stale or not of this sign-in (nothing changed)."
        )),
        Credential::ApiKey | Credential::PageOrKey => {
            let mut forbidden = unauthorized.clone();
            forbidden.description = format!("The key lacks the scope `{scope}`.");
            forbidden
        }
    };
    for (status, answer) in [("401", unauthorized), ("403", forbidden)] {
        let own = op
            .responses
            .responses
            .insert(status.into(), RefOr::T(answer));
        assert!(
            own.is_none(),
            "{name}: its {status} is web::access::GUARDED's, not its #[utoipa::path]'s"
        );
    }
}
