//! Money at every door (issue 27): the database's one rule for "may this
//! order get a new charge attempt", settled states held by the database,
//! cancels that never touch a refund, and business-retry keys derived so
//! that a retry created twice is charged once. On both backends, through
//! the doors a user has: HTTP (`POST /charges`, finance's retry, the
//! cancel), the store, and raw SQL.
//!
//! One idea per file under `tests/charge_gate/`: `holds.rs` (what holds an
//! order from a new charge), `database.rs` (the rules the database holds by
//! itself), `retries.rs` (a business retry's key and pre-check),
//! `late_changes.rs` (what the gateway may change after we recorded an
//! outcome), `finance_declines.rs` (finance's decline of what was sent),
//! `after_creation.rs` (what holds an attempt that already exists),
//! `resends.rs` (what holds a send after a lookup found nothing),
//! `rule_refusals.rs` (how a door answers a rule its code did not check
//! first), and `doors.rs` (the requests they all send).

#[macro_use]
mod common;

#[path = "common/declines.rs"]
mod declines;

#[path = "charge_gate/after_creation.rs"]
mod after_creation;
#[path = "charge_gate/database.rs"]
mod database;
#[path = "charge_gate/doors.rs"]
mod doors;
#[path = "charge_gate/finance_declines.rs"]
mod finance_declines;
#[path = "charge_gate/holds.rs"]
mod holds;
#[path = "charge_gate/late_changes.rs"]
mod late_changes;
#[path = "charge_gate/resends.rs"]
mod resends;
#[path = "charge_gate/retries.rs"]
mod retries;
#[path = "charge_gate/rule_refusals.rs"]
mod rule_refusals;
