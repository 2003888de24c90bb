//! A refusal by one of the database's rules, reaching a door whose code
//! did not refuse first (a race the code's check lost, a rule added to the
//! database later), is answered as what it is, nothing written, never the
//! 503 "the database is not available; retry" of an outage (a retry meets
//! the same rule): a rule a request can run into is a 409 with its code
//! and words; one only cobro's own writes can break is a 500 whose words
//! stay in the log.

use cobro::domain::ChargeRequest;
use cobro::state::State;
use cobro::store::StoreError;
use serde_json::{Value, json};

use super::common::{self, Backend, TestDb, enqueued, in_review_of, web_on};
use super::doors::post;

on_both_dbs!(
    a_rule_the_code_did_not_check_first_is_answered_as_what_it_is,
    a_gateway_ref_changed_is_refused_with_its_code,
);

/// A rule of the database's that cobro's code does not know: every change
/// of an attempt refused with CB020, a rule a request can run into.
const FROZEN: [&str; 2] = [
    "CREATE OR REPLACE FUNCTION cobro.test_rule() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
       RAISE EXCEPTION 'attempts are frozen for an audit' USING ERRCODE = 'CB020';
     END $$",
    "CREATE TRIGGER test_rule BEFORE UPDATE ON payment_attempts
     BEGIN SELECT RAISE(ABORT, 'CB020: attempts are frozen for an audit'); END",
];

/// The same with CB021, a rule only a write of cobro's own can break (here
/// its words name a table: they must reach the log only).
const BROKEN: [&str; 2] = [
    "CREATE OR REPLACE FUNCTION cobro.test_rule() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
       RAISE EXCEPTION 'no row in cobro.attempt_transitions (test)' USING ERRCODE = 'CB021';
     END $$",
    "CREATE TRIGGER test_rule BEFORE UPDATE ON payment_attempts
     BEGIN SELECT RAISE(ABORT, 'CB021: no row in attempt_transitions (test)'); END",
];

/// Puts `rule` in force on the attempts, in place of any earlier one,
/// raised as the database's own rules are (PostgreSQL: its code as
/// SQLSTATE; SQLite: its code leading the message).
async fn in_force(db: &TestDb, [pg, lite]: [&'static str; 2]) {
    // One transaction, on one connection: a connection whose schema is
    // stale would not see the old trigger dropped.
    let statements: &[&str] = match db.backend {
        Backend::Postgres => &[
            "DROP TRIGGER IF EXISTS test_rule ON cobro.payment_attempts",
            pg,
            "CREATE TRIGGER test_rule BEFORE UPDATE ON cobro.payment_attempts
             FOR EACH ROW EXECUTE FUNCTION cobro.test_rule()",
        ],
        Backend::Sqlite => &["DROP TRIGGER IF EXISTS test_rule", lite],
    };
    db.in_one_tx(statements, &[]).await.expect(pg);
}

/// Panics unless `answer` is `status`, says `says` and "nothing was
/// written", and neither advises a retry (the rule would refuse it again)
/// nor shows `hidden`.
fn assert_answered(what: &str, answer: &(u16, Value), status: u16, says: &str, hidden: &str) {
    let (got, body) = answer;
    assert_eq!(*got, status, "{what}: {body}");
    let msg = body["error"].as_str().unwrap_or_default();
    assert!(msg.contains(says), "{what}: {msg}");
    assert!(msg.contains("nothing was written"), "{what}: {msg}");
    assert!(
        !msg.contains("retry"),
        "{what}: a retry meets the rule: {msg}"
    );
    assert!(!msg.contains(hidden), "{what}: shows {hidden:?}: {msg}");
}

/// 409 naming CB020 with its words.
fn assert_refused_by_the_rule(what: &str, answer: &(u16, Value)) {
    assert_eq!(answer.1["code"], "CB020", "{what}: {}", answer.1);
    assert_answered(what, answer, 409, "frozen for an audit", "cobro.");
}

async fn a_rule_the_code_did_not_check_first_is_answered_as_what_it_is(db: &TestDb) {
    let unsent = ChargeRequest::parse("rule-unsent", 1_000, "USD", None, None).unwrap();
    let unsent = enqueued(&db.store, &unsent).await;
    let review = ChargeRequest::parse("rule-review", 2_000, "USD", None, None).unwrap();
    let review = in_review_of(&db.store, &review).await;
    in_force(db, FROZEN).await;
    let web = web_on(&db.store).await;

    // The cancel's own check lets an unsent attempt be cancelled; the rule
    // refuses the write.
    let body = json!({"reason": "customer_request"});
    let cancel = post(&web, "/orders/rule-unsent/cancel", "app", None, body).await;
    assert_refused_by_the_rule("cancel", &cancel);
    let (now, _) = db.store.load(unsent.id).await.unwrap();
    assert_eq!((now.state, now.cancel_reason), (State::Pendiente, None));

    // Finance's approval of an attempt in review: the same answer.
    let path = format!("/finance/api/attempts/{}/resolve", review.id);
    let body = json!({
        "action": "approve", "version": review.version, "charge_id": "ch_rule",
        "note": "the dashboard shows it paid"
    });
    let approve = post(&web, &path, "luis", None, body).await;
    assert_refused_by_the_rule("finance approve", &approve);
    let (now, _) = db.store.load(review.id).await.unwrap();
    assert_eq!(
        (now.state, now.version),
        (State::EnRevision, review.version)
    );

    // A rule only cobro's own writes can break: a defect, 500, its words
    // in the log only.
    in_force(db, BROKEN).await;
    let body = json!({"reason": "customer_request"});
    let cancel = post(&web, "/orders/rule-unsent/cancel", "app", None, body).await;
    assert_answered(
        "cancel",
        &cancel,
        500,
        "CB021: a defect in cobro",
        "attempt_transitions",
    );
    let (now, _) = db.store.load(unsent.id).await.unwrap();
    assert_eq!((now.state, now.cancel_reason), (State::Pendiente, None));
    web.stop().await;
}

/// PostgreSQL's own errors are no rule of cobro's, even when their words
/// begin as cobro's bad-input refusals do ("invalid …"): only their code
/// is read. SQLite's trigger messages are read for a code.
#[tokio::test]
async fn only_cobros_rules_are_read_as_refusals() {
    let lite = TestDb::new(Backend::Sqlite).await;
    let mut conn = lite.store.sqlite_pool().unwrap().acquire().await.unwrap();
    for sql in [
        "CREATE TEMP TABLE t (x INTEGER)",
        "CREATE TEMP TRIGGER t_refuses BEFORE INSERT ON t
         BEGIN SELECT RAISE(ABORT, 'invalid amount_minor: too large'); END",
    ] {
        sqlx::query(sql).execute(&mut *conn).await.unwrap();
    }
    let raised = sqlx::query("INSERT INTO t VALUES (1)")
        .execute(&mut *conn)
        .await
        .unwrap_err();
    drop(conn);
    let read = StoreError::Db(raised).rule_refusal();
    assert_eq!(read.map(|(code, _)| code).as_deref(), Some("22023"));
    lite.drop_db().await;
    let Some(db) = common::postgres_db().await else {
        return;
    };
    let native = sqlx::query("SELECT 'abc'::int")
        .execute(db.store.pg_pool().unwrap())
        .await
        .unwrap_err();
    assert!(
        native.to_string().contains("invalid input syntax"),
        "{native}"
    );
    assert_eq!(StoreError::Db(native).rule_refusal(), None);
    db.drop_db().await;
}

/// `gateway_ref`'s set-once rule names its code on both backends (CB008),
/// so a door reads it as a rule's refusal, never as an outage.
async fn a_gateway_ref_changed_is_refused_with_its_code(db: &TestDb) {
    let req = ChargeRequest::parse("rule-ref", 1_000, "USD", None, None).unwrap();
    let a = enqueued(&db.store, &req).await;
    let id = a.id.to_string();
    let set = match db.backend {
        Backend::Postgres => {
            "UPDATE cobro.payment_attempts SET gateway_ref = $2 WHERE id = $1::uuid"
        }
        Backend::Sqlite => "UPDATE payment_attempts SET gateway_ref = ?2 WHERE id = ?1",
    };
    db.in_one_tx(&[set], &[&id, "pi_first"])
        .await
        .expect("first set");
    let refused = db
        .in_one_tx(&[set], &[&id, "pi_second"])
        .await
        .expect_err("changed");
    let (code, words) = StoreError::Db(refused)
        .rule_refusal()
        .expect("a rule's refusal");
    assert_eq!(code, "CB008", "{words}");
    assert!(words.contains("set once"), "{words}");
}
