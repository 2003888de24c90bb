//! Money at every door (issue 27): the database's one rule for "may this
//! order get a new charge attempt", settled states held by the database,
//! cancels that never touch a refund, and business-retry keys derived so
//! that a retry created twice is charged once. On both backends, through
//! the doors a user has: HTTP (`POST /charges`, finance's retry, the
//! cancel), the store, and raw SQL.

#[macro_use]
mod common;

#[path = "common/declines.rs"]
mod declines;

use std::collections::BTreeSet;
use std::time::Duration;

use cobro::domain::{ChargeRequest, IdempotencyKey};
use cobro::sim::Faults;
use cobro::state::{Event, State};
use cobro::store::{Applied, Attempt, CancelReason, Change};
use cobro::webhook::{Scheme, Verifier};
use common::*;
use serde_json::{Value, json};
use uuid::Uuid;

on_both_backends!(
    a_contradicted_decline_holds_the_order_until_finance_resolves_its_case,
    a_cancel_that_means_do_not_charge_holds_the_order_at_every_door,
    a_cancel_never_touches_a_refund,
    settled_states_are_held_by_the_database,
    the_state_moves_table_is_the_state_machine,
    a_business_retry_key_is_derived_from_the_order_and_its_number,
    a_refund_that_fails_after_success_opens_a_case_and_frees_its_amount,
    finance_cannot_decline_a_payment_object_that_may_still_succeed,
    past_the_key_lifetime_the_pre_check_reads_the_gateways_listing,
);

/// A business retry scheduled a day out: nothing runs it in these tests.
const DAY: Duration = Duration::from_secs(86_400);

fn verifier() -> Verifier {
    Verifier::from_env_value(Scheme::StandardWebhooks, &test_secret()).unwrap()
}

async fn post(web: &Web, path: &str, who: &str, key: Option<&str>, body: Value) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .post(format!("{}{path}", web.url))
        .bearer_auth(secret(who))
        .json(&body);
    if let Some(k) = key {
        req = req.header("Idempotency-Key", k);
    }
    let resp = req.send().await.unwrap();
    (
        resp.status().as_u16(),
        resp.json().await.unwrap_or(Value::Null),
    )
}

/// `POST /charges` for `order` with a new key.
async fn charge_again(web: &Web, order: &str) -> (u16, Value) {
    let body = json!({"order_id": order, "amount_minor": 3000, "currency": "USD"});
    let key = Uuid::new_v4().to_string();
    post(web, "/charges", "app", Some(&key), body).await
}

async fn finance_retry(web: &Web, id: Uuid) -> (u16, Value) {
    let path = format!("/finance/api/attempts/{id}/retry");
    post(web, &path, "luis", None, json!({})).await
}

async fn signed_webhook(web: &Web, v: &Verifier, event: Value) {
    let body = event.to_string();
    let id = event["id"].as_str().unwrap().to_owned();
    let mut req = reqwest::Client::new()
        .post(format!("{}/webhooks/gateway", web.url))
        .header("content-type", "application/json")
        .body(body.clone());
    for (k, val) in v.sign(&id, chrono::Utc::now().timestamp(), body.as_bytes()) {
        req = req.header(k, val);
    }
    assert_eq!(req.send().await.unwrap().status(), 200);
}

fn assert_held(what: &str, (status, body): &(u16, Value), reason: &str, says: &str) {
    assert_eq!(*status, 409, "{what}: {body}");
    assert_eq!(body["reason"], reason, "{what}: {body}");
    let msg = body["error"].as_str().unwrap_or_default();
    assert!(msg.contains(says), "{what}: {msg}");
}

/// The first situation: the gateway reports an approval for an
/// attempt we recorded RECHAZADO (charge.failed, then charge.succeeded for
/// the same key). The case opens, and no door may charge the order again
/// until finance resolves it.
async fn a_contradicted_decline_holds_the_order_until_finance_resolves_its_case(b: Backend) {
    let db = TestDb::new(b).await;
    let v = verifier();
    let web = start_web(&db.store, v.clone()).await;
    let a = declined_with_retry(&db.store, "gate-1", DAY).await;
    for (id, kind, status) in [
        ("evt_g1", "charge.failed", "declined"),
        ("evt_g2", "charge.succeeded", "approved"),
    ] {
        let event = json!({
            "id": id, "type": kind, "created": chrono::Utc::now().timestamp(),
            "data": {"charge_id": "ch_g", "idempotency_key": a.idempotency_key,
                     "status": status, "decline_code": "card_declined"}
        });
        signed_webhook(&web, &v, event).await;
    }
    let cases = db.store.open_cases().await.unwrap();
    assert_eq!(cases.len(), 1, "{cases:?}");
    let case = cases[0].id;

    let held = format!("cobro escalations resolve-case --case {case}");
    assert_held(
        "finance's retry",
        &finance_retry(&web, a.id).await,
        "open_case",
        &held,
    );
    assert_held(
        "POST /charges",
        &charge_again(&web, "gate-1").await,
        "open_case",
        "unmatched_charge",
    );
    // The Rust door and a raw insert meet the same rule.
    let req = ChargeRequest::parse("gate-1", 3_000, "USD", None, None).unwrap();
    let e = db.store.enqueue(&req).await.unwrap_err();
    assert_eq!(e.hold(), Some(cobro::store::Hold::OpenCase), "{e}");
    let raw = db
        .exec(
            "INSERT INTO cobro.payment_attempts (id, order_id, amount_minor, currency, idempotency_key, state)
             VALUES (gen_random_uuid(), 'gate-1', 3000, 'USD', gen_random_uuid(), 'PENDIENTE')",
            "INSERT INTO payment_attempts (id, order_id, amount_minor, currency, idempotency_key, state, created_at, updated_at)
             VALUES (lower(hex(randomblob(18))), 'gate-1', 3000, 'USD', lower(hex(randomblob(18))), 'PENDIENTE', 0, 0)",
            &[],
        )
        .await
        .unwrap_err();
    // A raw insert gets the trigger's own words (constant on SQLite).
    assert!(raw.to_string().contains("may have charged it"), "{raw}");
    assert_eq!(
        db.store.attempts_for_order("gate-1").await.unwrap().len(),
        1
    );

    // Finance resolves the case with a note: the hold is lifted.
    db.store
        .resolve_case(case, "finance:ana", "refunded ch_g by hand")
        .await
        .unwrap();
    let (status, body) = charge_again(&web, "gate-1").await;
    assert_eq!(status, 201, "{body}");
    web.stop().await;
    db.drop_db().await;
}

/// The second situation, and every cancel reason: a reason that
/// means "do not charge this order" holds it at every door; the others
/// leave it open to a new charge.
async fn a_cancel_that_means_do_not_charge_holds_the_order_at_every_door(b: Backend) {
    let db = TestDb::new(b).await;
    let web = start_web(&db.store, verifier()).await;
    for reason in CancelReason::ALL {
        let order = format!("gate-cancel-{}", reason.as_str());
        let a = declined_with_retry(&db.store, &order, DAY).await;
        let (status, body) = post(
            &web,
            &format!("/orders/{order}/cancel"),
            "app",
            None,
            json!({"reason": reason.as_str()}),
        )
        .await;
        assert_eq!(status, 200, "{reason:?}: {body}");
        let retry = finance_retry(&web, a.id).await;
        let again = charge_again(&web, &order).await;
        if reason.holds_order() {
            let says = format!("was cancelled ({})", reason.as_str());
            assert_held("finance's retry", &retry, "cancelled", &says);
            assert_held("POST /charges", &again, "cancelled", &says);
            assert_eq!(
                db.store.attempts_for_order(&order).await.unwrap().len(),
                1,
                "{reason:?}: nothing written"
            );
        } else {
            // The order stays open: finance's retry is accepted (a worker
            // makes it), and so is the app's new charge.
            assert_eq!(retry.0, 202, "{reason:?}: {}", retry.1);
            assert_eq!(again.0, 201, "{reason:?}: {}", again.1);
        }
    }

    // A reason that holds, with nothing left to stop (no retry pending):
    // still recorded, and the order is held.
    let a = declined_with_retry(&db.store, "gate-cancel-late", DAY).await;
    let mut clear = Change::new(None, "retry_refused", "worker:test");
    clear.act_in = None;
    let a = match db.store.apply(&a, &clear).await.unwrap() {
        Applied::Moved(a) => *a,
        Applied::Lost => panic!("lost"),
    };
    db.exec(
        "UPDATE cobro.payment_attempts SET next_action_at = NULL WHERE id = $1::uuid",
        "UPDATE payment_attempts SET next_action_at = NULL WHERE id = ?1",
        &[&a.id.to_string()],
    )
    .await
    .unwrap();
    let (status, body) = post(
        &web,
        "/orders/gate-cancel-late/cancel",
        "app",
        None,
        json!({"reason": "paid_by_other_means"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_held(
        "finance's retry after a late cancel",
        &finance_retry(&web, a.id).await,
        "cancelled",
        "paid_by_other_means",
    );
    web.stop().await;
    db.drop_db().await;
}

/// The third situation: a cancel on an approved order with a
/// pending refund leaves the refund alone (it is the customer's money).
async fn a_cancel_never_touches_a_refund(b: Backend) {
    let db = TestDb::new(b).await;
    let web = start_web(&db.store, verifier()).await;
    let req = ChargeRequest::parse("gate-refund", 3_000, "USD", None, None).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;
    let a = db.store.load(id).await.unwrap().0;
    let a = step(&db.store, &a, Event::Claim, None).await;
    let a = step(&db.store, &a, Event::Approved, None).await;
    let refund = db
        .store
        .request_refund(
            a.id,
            cobro::domain::Amount::parse(1_000).unwrap(),
            IdempotencyKey::generate(),
            "app",
        )
        .await
        .unwrap();
    let (status, body) = post(
        &web,
        "/orders/gate-refund/cancel",
        "app",
        None,
        json!({"reason": "customer_request"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["detail"], "nothing left to cancel", "{body}");
    let r = db.store.load(refund.refund_id).await.unwrap().0;
    assert_eq!(r.state, State::Pendiente, "the refund is untouched");
    assert_eq!(r.cancel_reason, None);
    web.stop().await;
    db.drop_db().await;
}

/// The seventh situation: raw SQL cannot move a settled attempt,
/// nor make a move the state machine does not.
async fn settled_states_are_held_by_the_database(b: Backend) {
    let db = TestDb::new(b).await;
    let req = ChargeRequest::parse("gate-settled", 3_000, "USD", None, None).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;
    let a = db.store.load(id).await.unwrap().0;
    let a = step(&db.store, &a, Event::Claim, None).await;
    let approved = step(&db.store, &a, Event::Approved, None).await;
    let declined = declined_with_retry(&db.store, "gate-settled-2", DAY).await;
    let set = |id: Uuid, to: &'static str| {
        let db = &db;
        async move {
            db.exec(
                "UPDATE cobro.payment_attempts SET state = $2 WHERE id = $1::uuid",
                "UPDATE payment_attempts SET state = ?2 WHERE id = ?1",
                &[&id.to_string(), to],
            )
            .await
        }
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
    db.drop_db().await;
}

/// The database's table of moves is exactly the moves of
/// `state::transition` between two different states.
async fn the_state_moves_table_is_the_state_machine(b: Backend) {
    let db = TestDb::new(b).await;
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
    let table: BTreeSet<(String, String)> = match b {
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
    db.drop_db().await;
}

/// A business retry's key: the order's number two under the deployment's
/// namespace, the same from either door; PostgreSQL's SQL function
/// derives the same key Rust does.
async fn a_business_retry_key_is_derived_from_the_order_and_its_number(b: Backend) {
    let db = TestDb::new(b).await;
    let ns = db.store.settings().await.unwrap().key_namespace;
    let a = declined_with_retry(&db.store, "gate-key", DAY).await;
    let r = db
        .store
        .business_retry(a.id, 4, "finance:test", None)
        .await
        .unwrap();
    assert_eq!(r.attempt_number, 2);
    assert_eq!(
        r.idempotency_key,
        IdempotencyKey::for_retry(ns, "gate-key", 2).uuid()
    );
    if let Some(pool) = db.store.pg_pool() {
        for (order, n) in [("gate-key", 2), ("ñandú/ü 7", 3), ("x", 99)] {
            let sql: Uuid = sqlx::query_scalar("SELECT cobro.retry_key($1, $2)")
                .bind(order)
                .bind(n)
                .fetch_one(pool)
                .await
                .unwrap();
            assert_eq!(sql, IdempotencyKey::for_retry(ns, order, n).uuid());
        }
        // The namespace never changes once made.
        let err = sqlx::query("UPDATE cobro.settings SET key_namespace = gen_random_uuid()")
            .execute(pool)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("never changes"), "{err}");
    }
    db.drop_db().await;
}

/// Issue 27, item 9: a PostgreSQL failover to a replica that lacks the
/// last commits loses a business retry's row after the retry was sent.
/// The retry is created again with the same derived key, and the gateway
/// (which honours keys) charges the order once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_retry_created_again_after_a_lossy_failover_is_charged_once() {
    if skip_postgres("postgres_a_retry_created_again_after_a_lossy_failover_is_charged_once") {
        return;
    }
    let db = TestDb::new(Backend::Postgres).await;
    let pool = db.store.pg_pool().unwrap().clone();
    let sim = start_sim(true, Faults::default()).await;
    declines::decline_with(&sim.url(), "insufficient_funds").await;
    let worker = spawn_worker(worker_args(&db.url, &sim.url()));
    let first = declines::declined(&db.store, "gate-failover", None).await;
    worker.stop().await;
    set_faults(&sim.url(), &Faults::default()).await;

    let charged = |want: usize| {
        let store = db.store.clone();
        async move {
            eventually(Duration::from_secs(20), "the retry approved", || {
                let store = store.clone();
                async move {
                    let all = store.attempts_for_order("gate-failover").await.unwrap();
                    let approved: Vec<Attempt> = all
                        .into_iter()
                        .filter(|a| a.state == State::Aprobado)
                        .collect();
                    (approved.len() == want).then(|| approved[0].clone())
                }
            })
            .await
        }
    };
    declines::retry_now(&db, first.id).await;
    let worker = spawn_worker(worker_args(&db.url, &sim.url()));
    let retry = charged(1).await;
    worker.stop().await;
    assert_eq!(
        approved_per_order(&ledger(&sim.url()).await)["gate-failover"],
        1
    );

    // The failover: the retry's rows are gone (its attempt, every row that
    // names it, its wake-ups) and the declined attempt's retry is due
    // again, as on a replica that never saw the retry's transaction.
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SET LOCAL session_replication_role = replica")
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query("SELECT set_config('cobro_test.gone', $1, true)")
        .bind(retry.id.to_string())
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query(
        "DO $$
         DECLARE t text;
         BEGIN
             FOR t IN SELECT table_name FROM information_schema.columns
                       WHERE table_schema = 'cobro' AND column_name = 'attempt_id'
                         AND table_name <> 'payment_attempts' LOOP
                 EXECUTE format('DELETE FROM cobro.%I WHERE attempt_id = $1', t)
                     USING current_setting('cobro_test.gone')::uuid;
             END LOOP;
         END $$",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    sqlx::query("DELETE FROM apalis.jobs WHERE job::text LIKE '%' || $1 || '%'")
        .bind(retry.id.to_string())
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query("DELETE FROM cobro.payment_attempts WHERE id = $1")
        .bind(retry.id)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    declines::retry_now(&db, first.id).await;

    let worker = spawn_worker(worker_args(&db.url, &sim.url()));
    let again = charged(1).await;
    worker.stop().await;
    assert_ne!(again.id, retry.id, "a new row");
    assert_eq!(again.attempt_number, retry.attempt_number);
    assert_eq!(again.idempotency_key, retry.idempotency_key, "the same key");
    let ledger = ledger(&sim.url()).await;
    assert_eq!(
        approved_per_order(&ledger)["gate-failover"],
        1,
        "charged once at the gateway: {:?}",
        ledger.entries
    );
    sim.shutdown().await;
    db.drop_db().await;
}

/// The fourth situation: Stripe says a refund we hold APROBADO
/// failed (`refund.updated`, status `failed`). It is not a no-op: the
/// refund stays APROBADO (settled states stay settled) but is marked
/// failed, once, a case opens for finance, and its amount can be refunded
/// again.
async fn a_refund_that_fails_after_success_opens_a_case_and_frees_its_amount(b: Backend) {
    use cobro::domain::Amount;
    let db = TestDb::new(b).await;
    let secret = "whsec_cobro_test_refund_failed_0123456789";
    let v = Verifier::new(
        Scheme::Stripe,
        vec![cobro::webhook::Secret::parse(Scheme::Stripe, secret).unwrap()],
    )
    .unwrap();
    let web = start_web(&db.store, v.clone()).await;
    let req = ChargeRequest::parse("gate-refund-failed", 3_000, "USD", None, None).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;
    let a = db.store.load(id).await.unwrap().0;
    let a = step(&db.store, &a, Event::Claim, None).await;
    let charge = step(&db.store, &a, Event::Approved, Some("pi_1")).await;
    let refund = |amount: i64| {
        let store = db.store.clone();
        async move {
            store
                .request_refund(
                    charge.id,
                    Amount::parse(amount).unwrap(),
                    IdempotencyKey::generate(),
                    "app",
                )
                .await
        }
    };
    let r = refund(3_000).await.unwrap();
    let r = db.store.load(r.refund_id).await.unwrap().0;
    let r = step(&db.store, &r, Event::Claim, None).await;
    let r = step(&db.store, &r, Event::Approved, Some("re_1")).await;
    assert!(refund(1).await.is_err(), "all of it is refunded");

    let body = json!({
        "id": "evt_refund_failed", "type": "refund.updated", "object": "event",
        "created": chrono::Utc::now().timestamp(),
        "data": {"object": {
            "id": "re_1", "object": "refund", "status": "failed",
            "failure_reason": "expired_or_canceled_card", "amount": 3000, "currency": "usd",
            "payment_intent": "pi_1",
            "metadata": {cobro::gateway::stripe::META_KEY: r.idempotency_key.to_string()}
        }}
    })
    .to_string();
    let mut post = reqwest::Client::new()
        .post(format!("{}/webhooks/gateway", web.url))
        .header("Content-Type", "application/json")
        .body(body.clone());
    for (k, val) in v.sign("", chrono::Utc::now().timestamp(), body.as_bytes()) {
        post = post.header(k, val);
    }
    let resp = post.send().await.unwrap();
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);

    let now = db.store.load(r.id).await.unwrap().0;
    assert_eq!(now.state, State::Aprobado, "settled states stay settled");
    let log = db.store.transitions(r.id).await.unwrap();
    assert_eq!(
        log.last().unwrap().cause,
        "refund_failed_after_success",
        "{log:?}"
    );
    let cases = db.store.open_cases().await.unwrap();
    assert_eq!(cases.len(), 1, "{cases:?}");
    assert_eq!(cases[0].kind.as_str(), "missing_at_gateway");
    assert_eq!(cases[0].attempt_id, Some(r.id));
    // Its amount is free again, and the mark is never undone.
    refund(3_000)
        .await
        .expect("the failed refund's amount is refundable");
    let err = db
        .exec(
            "UPDATE cobro.payment_attempts SET refund_failed_at = NULL WHERE id = $1::uuid",
            "UPDATE payment_attempts SET refund_failed_at = NULL WHERE id = ?1",
            &[&r.id.to_string()],
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("never undone"), "{err}");
    web.stop().await;
    db.drop_db().await;
}

/// The sixth situation: finance's decline of an attempt whose
/// PaymentIntent exists at the gateway would leave it able to succeed
/// later. In review it is asked for (202; the worker cancels the object at
/// the gateway first: tests/stripe_local.rs); still being checked it is
/// refused, saying why. Neither records a decline.
async fn finance_cannot_decline_a_payment_object_that_may_still_succeed(b: Backend) {
    let db = TestDb::new(b).await;
    let web = start_web(&db.store, verifier()).await;
    let req = ChargeRequest::parse("gate-pi", 3_000, "USD", None, None).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;
    let a = db.store.load(id).await.unwrap().0;
    let a = step(&db.store, &a, Event::Claim, None).await;
    let mut prepared = Change::new(Some(Event::Prepared), "payment_intent_created", "worker:w");
    prepared.gateway_ref = Some("pi_open_1");
    let Applied::Moved(a) = db.store.apply(&a, &prepared).await.unwrap() else {
        panic!("not recorded");
    };
    let a = step(&db.store, &a, Event::Unknown, None).await;
    let decline = |a: &Attempt| {
        let path = format!("/finance/api/attempts/{}/resolve", a.id);
        let body = json!({"action": "decline", "version": a.version, "code": "finance_declined",
                          "note": "the customer says it failed"});
        let web = &web;
        async move { post(web, &path, "luis", None, body).await }
    };
    // DESCONOCIDO: refused, saying why.
    let (status, body) = decline(&a).await;
    assert_eq!(status, 409, "{body}");
    let msg = body["error"].as_str().unwrap();
    assert!(
        msg.contains("pi_open_1") && msg.contains("once it is in EN_REVISION"),
        "{msg}"
    );
    // EN_REVISION: asked for, not recorded.
    let a = step(&db.store, &a, Event::ChecksExhausted, None).await;
    let (status, body) = decline(&a).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["state"], "EN_REVISION");
    let log = db.store.transitions(a.id).await.unwrap();
    let last = log.last().unwrap();
    assert_eq!(
        (last.cause.as_str(), last.actor.as_str()),
        ("finance_decline_requested", "finance:luis")
    );
    let now = db.store.load(a.id).await.unwrap().0;
    assert_eq!(now.state, State::EnRevision);
    assert_eq!(now.decline_code, None);
    web.stop().await;
    db.drop_db().await;
}

/// The fifth situation: before a business retry the declined
/// attempt is looked up; past the gateway's key lifetime a lookup by key
/// proves nothing (the gateway forgot the key), so the pre-check reads the
/// gateway's listing. Here lookups by key all fail (they would only
/// postpone the retry) and the listing shows the gateway did charge the
/// declined key: a case opens and no retry is made.
async fn past_the_key_lifetime_the_pre_check_reads_the_gateways_listing(b: Backend) {
    let db = TestDb::new(b).await;
    let sim = start_sim(
        true,
        Faults {
            p_lookup_fail: 1.0,
            ..Faults::default()
        },
    )
    .await;
    let a = declined_with_retry(&db.store, "gate-old-key", DAY).await;
    let resp = reqwest::Client::new()
        .post(format!("{}/control/inject", sim.url()))
        .json(&json!({
            "kind": "charge", "idempotency_key": a.idempotency_key.to_string(),
            "order_id": "gate-old-key", "amount_minor": 3000, "currency": "USD",
        }))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "inject: {}", resp.status());
    // The attempt began two days ago: its key is past the 24 h lifetime.
    db.exec(
        "UPDATE cobro.payment_attempts SET created_at = now() - interval '2 days' WHERE id = $1::uuid",
        "UPDATE payment_attempts SET created_at = created_at - 172800000 WHERE id = ?1",
        &[&a.id.to_string()],
    )
    .await
    .unwrap();
    declines::retry_now(&db, a.id).await;
    engine(&db.store, &sim.url(), "w")
        .process(a.id)
        .await
        .unwrap();
    let cases = db.store.open_cases().await.unwrap();
    assert_eq!(cases.len(), 1, "{cases:?}");
    assert_eq!(cases[0].kind.as_str(), "unmatched_charge");
    assert_eq!(
        db.store
            .attempts_for_order("gate-old-key")
            .await
            .unwrap()
            .len(),
        1,
        "no retry"
    );
    sim.shutdown().await;
    db.drop_db().await;
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
