//! Who may call which route of the web process, over real HTTP, on both
//! backends: every route × {no credential, a bad one, a key without the
//! scope, the right key} → 401 / 401 / 403 / 2xx, with nothing changed by a
//! refused request; the "agent" key of seed 003 (read scopes only) lists
//! the queue and gets the summary, and gets 403 on every write; the
//! webhook receiver, `/health` and `/openapi.json` need no credential; the
//! key's name is the actor in the log; a cross-site post (a browser's form:
//! `text/plain`, another `Origin`, its cached Basic sign-in) changes nothing.
//!
//! One idea per file under `tests/access/`: `scopes.rs` (which scope each
//! route needs, the agent's read-only key), `cross_site.rs` (cross-site
//! posts and form tokens), `open.rs` (the routes that need no credential),
//! and `fixtures.rs` (the attempts, cases and clients they start from).

#[macro_use]
mod common;
#[path = "access/cross_site.rs"]
mod cross_site;
#[path = "access/fixtures.rs"]
mod fixtures;
#[path = "access/open.rs"]
mod open;
#[path = "access/scopes.rs"]
mod scopes;
