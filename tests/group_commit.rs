//! PostgreSQL group commit: the compare-and-sets of handlers finishing
//! together share a statement, and each is still fenced by its own version
//! and logged only if it moved.

#[macro_use]
mod common;

use cobro::domain::ChargeRequest;
use cobro::state::{Event, State};
use cobro::store::{Applied, Attempt, Change, Store};
use common::*;
use futures::future::join_all;

async fn claimed(store: &Store, order: &str) -> (Attempt, Attempt) {
    let req = ChargeRequest::parse(order, 1_000, "USD", None, Some("pm_test_visa")).unwrap();
    let pending = enqueued(store, &req).await;
    let held = step(store, &pending, Event::Claim, None).await;
    (pending, held)
}

#[tokio::test]
async fn answers_finishing_together_share_statements_and_a_stale_one_loses_alone() {
    let Some(db) = postgres_db().await else {
        return;
    };
    let mut held = Vec::new();
    for i in 0..16 {
        held.push(claimed(&db.store, &format!("gc-{i}")).await.1);
    }
    let (stale, stale_held) = claimed(&db.store, "gc-stale").await;
    let group = db.store.clone().with_group_commit(32);
    let approve = |n: usize| {
        let mut c = Change::new(Some(Event::Approved), "gateway_approved", "worker:test");
        c.charge_id = Some(["ch_a", "ch_b", "ch_c", "ch_d"][n % 4]);
        c
    };
    let changes: Vec<Change> = (0..16).map(approve).collect();
    let stale_change = approve(0);
    let mut writes: Vec<_> = held
        .iter()
        .zip(&changes)
        .map(|(a, c)| group.apply(a, c))
        .collect();
    // Written from a row read before its claim: its version is gone.
    writes.push(group.apply(&stale, &stale_change));
    let results = join_all(writes).await;

    for (a, r) in held.iter().zip(&results) {
        match r.as_ref().unwrap() {
            Applied::Moved(now) => {
                assert_eq!(now.state, State::Aprobado);
                assert_eq!(now.version, a.version + 1);
                assert!(now.gateway_charge_id.is_some());
            }
            Applied::Lost => panic!("attempt {} lost a race nobody ran", a.id),
        }
        assert_eq!(
            path(&db.store, a.id).await,
            ["PENDIENTE", "EN_PROCESO", "APROBADO"]
        );
    }
    assert_eq!(*results[16].as_ref().unwrap(), Applied::Lost);
    let (after, _) = db.store.load(stale.id).await.unwrap();
    assert_eq!(after, stale_held, "a lost compare-and-set writes nothing");
    assert_eq!(path(&db.store, stale.id).await, ["PENDIENTE", "EN_PROCESO"]);
    // One statement is one now(): sixteen answers took fewer statements.
    let stamps = db
        .scalar(
            "SELECT count(DISTINCT updated_at) FROM cobro.payment_attempts WHERE state = 'APROBADO'",
            "",
        )
        .await;
    assert!(stamps < 16, "16 answers in {stamps} statements");
    db.drop_db().await;
}

#[tokio::test]
async fn a_row_the_database_refuses_fails_alone_and_the_others_land() {
    let Some(db) = postgres_db().await else {
        return;
    };
    let mut held = Vec::new();
    for i in 0..6 {
        held.push(claimed(&db.store, &format!("gc-ref-{i}")).await.1);
    }
    // The first already has a gateway object; a second one is refused by
    // the database (set once), which fails the whole shared statement.
    db.exec(
        "UPDATE cobro.payment_attempts SET gateway_ref = 'pi_first' WHERE id = $1::uuid",
        "",
        &[&held[0].id.to_string()],
    )
    .await
    .unwrap();
    let (first, _) = db.store.load(held[0].id).await.unwrap();
    held[0] = first;
    let group = db.store.clone().with_group_commit(32);
    let changes: Vec<Change> = (0..6)
        .map(|i| {
            let mut c = Change::new(Some(Event::Approved), "gateway_approved", "worker:test");
            c.charge_id = Some("ch_ok");
            if i == 0 {
                c.gateway_ref = Some("pi_second");
            }
            c
        })
        .collect();
    let results = join_all(held.iter().zip(&changes).map(|(a, c)| group.apply(a, c))).await;

    let refused = results[0]
        .as_ref()
        .expect_err("the set-once trigger refuses it");
    assert!(refused.to_string().contains("set once"), "{refused}");
    let (first, _) = db.store.load(held[0].id).await.unwrap();
    assert_eq!(first.state, State::EnProceso);
    assert_eq!(first.gateway_ref.as_deref(), Some("pi_first"));
    for (a, r) in held.iter().zip(&results).skip(1) {
        assert!(
            matches!(r, Ok(Applied::Moved(now)) if now.state == State::Aprobado),
            "{r:?}"
        );
        assert_eq!(
            path(&db.store, a.id).await,
            ["PENDIENTE", "EN_PROCESO", "APROBADO"]
        );
    }
    let logged = db
        .scalar(
            "SELECT count(*) FROM cobro.attempt_transitions WHERE to_state = 'APROBADO'",
            "",
        )
        .await;
    assert_eq!(logged, 5);
    db.drop_db().await;
}
