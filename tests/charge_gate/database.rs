//! The rules the database holds by itself, whatever door the SQL comes
//! through: a settled attempt stays settled, a state moves only as the
//! state machine does (its table of moves is the machine's), and SQLite's
//! trigger messages are constant strings.

use std::collections::BTreeSet;

use cobro::domain::ChargeRequest;
use cobro::state::{Event, State};
use uuid::Uuid;

use super::common::{self, Backend, TestDb, declined_with_retry, enqueued, raw_move, step};
use super::doors::DAY;

on_both_dbs!(
    settled_states_are_held_by_the_database,
    the_state_moves_table_is_the_state_machine,
);

/// The seventh situation: raw SQL cannot move a settled attempt,
/// nor make a move the state machine does not.
async fn settled_states_are_held_by_the_database(db: &TestDb) {
    let req = ChargeRequest::parse("gate-settled", 3_000, "USD", None, None).unwrap();
    let a = enqueued(&db.store, &req).await;
    let a = step(&db.store, &a, Event::Claim, None).await;
    let approved = step(&db.store, &a, Event::Approved, None).await;
    let declined = declined_with_retry(&db.store, "gate-settled-2", DAY).await;
    // Each raw move writes its log row, as a careful door would: what
    // refuses it is the state rule, not the missing row.
    let set = |id: Uuid, to: &'static str| {
        let db = &db;
        async move { raw_move(db, &format!("id = '{id}'"), to).await }
    };
    for (id, to) in [
        (approved.id, "PENDIENTE"),
        (approved.id, "RECHAZADO"),
        (approved.id, "EN_REVISION"),
        (declined.id, "APROBADO"),
        (declined.id, "PENDIENTE"),
    ] {
        let err = set(id, to).await.unwrap_err();
        assert!(
            err.to_string().contains("a settled attempt stays settled"),
            "{id} -> {to}: {err}"
        );
    }
    assert_eq!(
        db.store.load(approved.id).await.unwrap().0.state,
        State::Aprobado
    );
    assert_eq!(
        db.store.load(declined.id).await.unwrap().0.state,
        State::Rechazado
    );
    // Not a move of the machine either: PENDIENTE -> DESCONOCIDO.
    let req = ChargeRequest::parse("gate-settled-3", 3_000, "USD", None, None).unwrap();
    let fresh = db.store.enqueue(&req).await.unwrap().attempt_id;
    let err = set(fresh, "DESCONOCIDO").await.unwrap_err();
    assert!(err.to_string().contains("not a move"), "{err}");
    // A move the machine makes still goes through.
    set(fresh, "EN_PROCESO").await.unwrap();
}

/// The database's table of moves is exactly the moves of
/// `state::transition` between two different states.
async fn the_state_moves_table_is_the_state_machine(db: &TestDb) {
    let mut machine = BTreeSet::new();
    for from in State::ALL {
        for event in Event::ALL {
            if let Ok(next) = cobro::state::transition(from, event)
                && next.to != from
            {
                machine.insert((from.as_str().to_owned(), next.to.as_str().to_owned()));
            }
        }
    }
    let table: BTreeSet<(String, String)> = match db.backend {
        Backend::Postgres => {
            sqlx::query_as("SELECT from_state, to_state FROM cobro.state_moves")
                .fetch_all(db.store.pg_pool().unwrap())
                .await
        }
        Backend::Sqlite => {
            sqlx::query_as("SELECT from_state, to_state FROM state_moves")
                .fetch_all(db.store.sqlite_pool().unwrap())
                .await
        }
    }
    .unwrap()
    .into_iter()
    .collect();
    assert_eq!(table, machine);
}

/// SQLite's rules are triggers whose messages are constant strings: a
/// schema whose `RAISE` takes an expression cannot be read at all by
/// SQLite before 3.47 (Debian 12's `sqlite3` is 3.40), so an operator's
/// `sqlite3 cobro.db` would fail on the whole file.
#[test]
fn sqlite_trigger_messages_are_constant_strings() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/sqlite");
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let sql = std::fs::read_to_string(&path).unwrap();
        for (i, raise) in sql.match_indices("RAISE(ABORT,") {
            let rest = sql[i + raise.len()..].trim_start();
            let literal = rest
                .strip_prefix('\'')
                .unwrap_or_else(|| panic!("{}: RAISE without a string literal", path.display()));
            // The literal ends at a quote not doubled; then the call closes.
            let mut chars = literal.char_indices().peekable();
            let end = loop {
                let (at, c) = chars.next().expect("an unterminated literal");
                if c == '\'' {
                    if chars.peek().map(|(_, n)| *n) == Some('\'') {
                        chars.next();
                        continue;
                    }
                    break at;
                }
            };
            assert!(
                literal[end + 1..].trim_start().starts_with(')'),
                "{}: RAISE's message is an expression, not a constant string: {}",
                path.display(),
                &literal[..end.min(80)]
            );
            checked += 1;
        }
    }
    assert!(checked > 20, "only {checked} RAISE calls found");
}
