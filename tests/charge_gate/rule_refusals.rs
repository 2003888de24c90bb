//! A refusal by one of the database's rules, reaching a door whose code
//! did not refuse first (a race the code's check lost, a rule added to the
//! database later), is answered as what it is: 409 with the rule's code
//! and words, nothing written, never the 503 "the database is not
//! available; retry" of an outage, since a retry meets the same rule.

use cobro::domain::ChargeRequest;
use cobro::state::State;
use serde_json::{Value, json};

use super::common::{self, Backend, TestDb, enqueued, finish_web, in_review_of, web_on};
use super::doors::post;

on_both_backends!(a_rule_the_code_did_not_check_first_is_a_409_naming_it);

/// A rule that refuses every change of an attempt, raised as the
/// database's own rules are (PostgreSQL: its code as SQLSTATE; SQLite: its
/// code leading the message).
async fn add_a_rule_the_code_does_not_know(db: &TestDb) {
    const WORDS: &str = "attempts are frozen for an audit";
    db.exec(
        "CREATE FUNCTION cobro.test_frozen() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           RAISE EXCEPTION 'attempts are frozen for an audit' USING ERRCODE = 'CB020';
         END $$",
        "CREATE TRIGGER test_frozen BEFORE UPDATE ON payment_attempts
         BEGIN SELECT RAISE(ABORT, 'CB020: attempts are frozen for an audit'); END",
        &[],
    )
    .await
    .expect(WORDS);
    if db.backend == Backend::Postgres {
        db.exec(
            "CREATE TRIGGER test_frozen BEFORE UPDATE ON cobro.payment_attempts
             FOR EACH ROW EXECUTE FUNCTION cobro.test_frozen()",
            "",
            &[],
        )
        .await
        .expect(WORDS);
    }
}

fn assert_refused_by_the_rule(what: &str, (status, body): &(u16, Value)) {
    assert_eq!(*status, 409, "{what}: {body}");
    assert_eq!(body["code"], "CB020", "{what}: {body}");
    let msg = body["error"].as_str().unwrap_or_default();
    assert!(
        msg.contains("frozen for an audit") && msg.contains("nothing was written"),
        "{what}: {msg}"
    );
    assert!(
        !msg.contains("retry"),
        "{what}: a retry meets the rule: {msg}"
    );
}

async fn a_rule_the_code_did_not_check_first_is_a_409_naming_it(b: Backend) {
    let db = TestDb::new(b).await;
    let unsent = ChargeRequest::parse("rule-unsent", 1_000, "USD", None, None).unwrap();
    let unsent = enqueued(&db.store, &unsent).await;
    let review = ChargeRequest::parse("rule-review", 2_000, "USD", None, None).unwrap();
    let review = in_review_of(&db.store, &review).await;
    add_a_rule_the_code_does_not_know(&db).await;
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
    finish_web(web, db).await;
}
