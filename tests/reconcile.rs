//! Daily reconciliation, scenario by scenario, on both backends, against a
//! real gateway simulator: each of the four discrepancy kinds opens exactly
//! one case, a clean window none, a re-run nothing new; an unambiguous
//! DESCONOCIDO or EN_REVISION attempt is settled through the state machine
//! with the gateway as the cause, and gets no case; a failed listing opens
//! nothing.

#[macro_use]
mod common;

use std::time::Duration;

use cobro::domain::ChargeRequest;
use cobro::gateway::HttpGateway;
use cobro::recon::{CaseKind, ReconError, Report, reconcile};
use cobro::sim::{Faults, Injection, LedgerEntry, RefundEntry};
use cobro::state::{Event, State};
use cobro::store::{Attempt, CaseStatus, Store};
use common::*;
use serde::de::DeserializeOwned;

on_both_dbs!(
    a_clean_window_opens_nothing_and_a_rerun_nothing_new,
    a_double_charge_opens_exactly_one_case,
    a_charge_made_outside_cobro_opens_exactly_one_case,
    a_charge_declined_here_but_approved_there_opens_exactly_one_case,
    an_approved_attempt_missing_at_the_gateway_opens_exactly_one_case,
    an_amount_mismatch_opens_exactly_one_case,
    refund_discrepancies_open_one_case_each,
    refunds_the_gateway_settled_the_other_way_are_marked,
    an_unknown_attempt_approved_at_the_gateway_is_settled_not_escalated,
    a_failed_listing_opens_nothing,
);

async fn run(store: &Store, gw: &HttpGateway) -> Report {
    reconcile(store, gw, &around_now())
        .await
        .expect("reconciliation runs")
}

/// The kinds of the cases a run opened, and asserts it settled nothing.
fn opened(r: &Report) -> Vec<CaseKind> {
    r.cases
        .iter()
        .filter(|c| c.status == CaseStatus::New)
        .map(|c| c.kind)
        .collect()
}

/// A second run of the same window: nothing new, the same cases already open.
async fn assert_rerun_opens_nothing(store: &Store, gw: &HttpGateway, first: &Report) {
    let again = run(store, gw).await;
    assert_eq!(again.opened, 0, "{again:#?}");
    assert_eq!(again.already_open, first.opened + first.already_open);
    assert!(again.resolved.is_empty());
    let open = store.open_cases().await.unwrap();
    assert_eq!(open.len(), first.opened, "{open:#?}");
}

/// The dedupe keys of the open cases.
async fn open_dedupe_keys(store: &Store) -> Vec<String> {
    let open = store.open_cases().await.unwrap();
    open.into_iter().map(|c| c.dedupe_key).collect()
}

async fn pending(store: &Store, order: &str, amount: i64) -> Attempt {
    let req = ChargeRequest::parse(order, amount, "EUR", None, None).unwrap();
    let id = store.enqueue(&req).await.unwrap().attempt_id;
    store.load(id).await.unwrap().0
}

/// `POST /control/inject`: a charge or refund the gateway made outside cobro.
async fn inject<T: DeserializeOwned>(sim_url: &str, inj: &Injection) -> T {
    reqwest::Client::new()
        .post(format!("{sim_url}/control/inject"))
        .json(inj)
        .send()
        .await
        .expect("POST /control/inject")
        .error_for_status()
        .expect("injection accepted")
        .json()
        .await
        .expect("injected entry")
}

fn charge_injection(order: &str, amount: i64, key: Option<uuid::Uuid>) -> Injection {
    Injection {
        kind: "charge".into(),
        idempotency_key: key.map(|k| k.to_string()),
        order_id: order.into(),
        amount_minor: amount,
        currency: "EUR".into(),
        decline_code: None,
        charge_id: None,
        at: None,
    }
}

async fn a_clean_window_opens_nothing_and_a_rerun_nothing_new(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let gw = sim_gateway(&sim.url());
    // The real path: a worker charges three orders and refunds one.
    let worker = spawn_worker(worker_args(&db.url, &sim.url()));
    let mut charges = Vec::new();
    for i in 0..3 {
        charges.push(pending(&db.store, &format!("clean-{i}"), 1_000 + i).await);
    }
    for a in &charges {
        settled(&db.store, a.id, State::Aprobado, Duration::from_secs(20)).await;
    }
    let refund = ask_refund(&db.store, charges[0].id, 250, "test").await;
    settled(
        &db.store,
        refund.refund_id,
        State::Aprobado,
        Duration::from_secs(20),
    )
    .await;
    worker.stop().await;

    let r = run(&db.store, &gw).await;
    assert_eq!((r.gateway_charges, r.gateway_refunds, r.ours), (3, 1, 4));
    assert!(r.cases.is_empty() && r.resolved.is_empty(), "{r:#?}");
    assert!(r.in_flight.is_empty());
    assert_rerun_opens_nothing(&db.store, &gw, &r).await;
    assert!(db.store.all_cases().await.unwrap().is_empty());
    sim.shutdown().await;
}

async fn a_double_charge_opens_exactly_one_case(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let gw = sim_gateway(&sim.url());
    let ours = charged(&db.store, &gw, "double-1", 4_200).await;
    // The gateway charged the order again, under another key.
    let twin: LedgerEntry = inject(&sim.url(), &charge_injection("double-1", 4_200, None)).await;

    let r = run(&db.store, &gw).await;
    assert_eq!(opened(&r), [CaseKind::DoubleCharge], "{r:#?}");
    let first = ours.gateway_charge_id.clone().unwrap();
    let mut ids = [first, twin.charge_id];
    ids.sort();
    let case = &db.store.open_cases().await.unwrap()[0];
    assert_eq!(case.kind, "double_charge");
    assert_eq!(
        case.dedupe_key,
        format!("double_charge:double-1:{}", ids.join(","))
    );
    assert_eq!(case.attempt_id, Some(ours.id));
    assert_eq!(case.order_id.as_deref(), Some("double-1"));
    assert_eq!(case.details["gateway"].as_array().map(Vec::len), Some(2));
    assert_eq!(case.resolved_at, None);
    assert_rerun_opens_nothing(&db.store, &gw, &r).await;
    sim.shutdown().await;
}

async fn a_charge_made_outside_cobro_opens_exactly_one_case(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let gw = sim_gateway(&sim.url());
    charged(&db.store, &gw, "known-1", 1_000).await;
    let stranger: LedgerEntry = inject(&sim.url(), &charge_injection("nobody-1", 990, None)).await;

    let r = run(&db.store, &gw).await;
    assert_eq!(opened(&r), [CaseKind::UnmatchedCharge], "{r:#?}");
    let case = &db.store.open_cases().await.unwrap()[0];
    assert_eq!(
        case.dedupe_key,
        format!("unmatched_charge:{}", stranger.charge_id)
    );
    assert_eq!(case.attempt_id, None);
    assert_eq!(
        case.gateway_ref.as_deref(),
        Some(stranger.charge_id.as_str())
    );
    assert_eq!(case.details["gateway"]["amount_minor"], 990);
    assert_rerun_opens_nothing(&db.store, &gw, &r).await;
    sim.shutdown().await;
}

async fn a_charge_declined_here_but_approved_there_opens_exactly_one_case(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let gw = sim_gateway(&sim.url());
    let a = pending(&db.store, "contradiction-1", 1_500).await;
    let a = step(&db.store, &a, Event::Claim, None).await;
    let a = step(&db.store, &a, Event::Declined, None).await;
    let there: LedgerEntry = inject(
        &sim.url(),
        &charge_injection("contradiction-1", 1_500, Some(a.idempotency_key)),
    )
    .await;

    let r = run(&db.store, &gw).await;
    assert_eq!(opened(&r), [CaseKind::UnmatchedCharge], "{r:#?}");
    assert!(r.resolved.is_empty(), "RECHAZADO is never settled");
    let case = &db.store.open_cases().await.unwrap()[0];
    assert_eq!(
        case.dedupe_key,
        format!("unmatched_charge:{}", there.charge_id)
    );
    assert_eq!(case.attempt_id, Some(a.id));
    assert_eq!(case.details["ours"]["state"], "RECHAZADO");
    assert_eq!(db.store.load(a.id).await.unwrap().0.state, State::Rechazado);
    assert_rerun_opens_nothing(&db.store, &gw, &r).await;
    sim.shutdown().await;
}

async fn an_approved_attempt_missing_at_the_gateway_opens_exactly_one_case(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let gw = sim_gateway(&sim.url());
    charged(&db.store, &gw, "fine-1", 1_000).await;
    let ghost = pending(&db.store, "ghost-1", 2_000).await;
    let ghost = step(&db.store, &ghost, Event::Claim, None).await;
    let ghost = step(&db.store, &ghost, Event::Approved, Some("ch_ghost")).await;

    let r = run(&db.store, &gw).await;
    assert_eq!(opened(&r), [CaseKind::MissingAtGateway], "{r:#?}");
    let case = &db.store.open_cases().await.unwrap()[0];
    assert_eq!(case.dedupe_key, format!("missing_at_gateway:{}", ghost.id));
    assert_eq!(case.attempt_id, Some(ghost.id));
    assert_eq!(case.gateway_ref.as_deref(), Some("ch_ghost"));
    assert_eq!(case.details["gateway_lookup"]["result"], "not_found");
    let looked_up = ledger(&sim.url()).await.stats.lookup_requests;
    assert_eq!(looked_up, 1, "confirmed by key before the case was opened");
    assert_rerun_opens_nothing(&db.store, &gw, &r).await;
    sim.shutdown().await;
}

async fn an_amount_mismatch_opens_exactly_one_case(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let gw = sim_gateway(&sim.url());
    // Our attempt is for 10.00; the gateway captured 9.90 under its key.
    let a = pending(&db.store, "mismatch-1", 1_000).await;
    let there: LedgerEntry = inject(
        &sim.url(),
        &charge_injection("mismatch-1", 990, Some(a.idempotency_key)),
    )
    .await;
    let a = step(&db.store, &a, Event::Claim, None).await;
    step(&db.store, &a, Event::Approved, Some(&there.charge_id)).await;

    let r = run(&db.store, &gw).await;
    assert_eq!(opened(&r), [CaseKind::AmountMismatch], "{r:#?}");
    let case = &db.store.open_cases().await.unwrap()[0];
    assert_eq!(
        case.dedupe_key,
        format!("amount_mismatch:{}", there.charge_id)
    );
    assert_eq!(case.attempt_id, Some(a.id));
    assert_eq!(
        (
            &case.details["gateway"]["amount_minor"],
            &case.details["ours"]["amount_minor"]
        ),
        (&serde_json::json!(990), &serde_json::json!(1_000))
    );
    assert_eq!(
        case.details["reason"], "the gateway approved 9.90 EUR; our attempt is for 10.00 EUR",
        "amounts a person reads are in major units"
    );
    assert_rerun_opens_nothing(&db.store, &gw, &r).await;
    sim.shutdown().await;
}

async fn refund_discrepancies_open_one_case_each(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let gw = sim_gateway(&sim.url());
    let charge = charged(&db.store, &gw, "refunds-1", 5_000).await;
    let charge_id = charge.gateway_charge_id.clone().unwrap();
    // Refunded at the gateway by someone else.
    let stranger: RefundEntry = inject(
        &sim.url(),
        &Injection {
            kind: "refund".into(),
            charge_id: Some(charge_id),
            ..charge_injection("refunds-1", 700, None)
        },
    )
    .await;
    // A refund APROBADO here that the gateway never made.
    let asked = ask_refund(&db.store, charge.id, 300, "test").await;
    let ghost = db.store.load(asked.refund_id).await.unwrap().0;
    let ghost = step(&db.store, &ghost, Event::Claim, None).await;
    step(&db.store, &ghost, Event::Approved, Some("re_ghost")).await;

    let r = run(&db.store, &gw).await;
    let mut kinds = opened(&r);
    kinds.sort();
    assert_eq!(
        kinds,
        [CaseKind::UnmatchedRefund, CaseKind::MissingAtGateway],
        "{r:#?}"
    );
    let keys = open_dedupe_keys(&db.store).await;
    assert!(keys.contains(&format!("unmatched_refund:{}", stranger.refund_id)));
    assert!(keys.contains(&format!("missing_at_gateway:{}", ghost.id)));
    assert_eq!(ledger(&sim.url()).await.stats.refund_lookup_requests, 1);
    assert_rerun_opens_nothing(&db.store, &gw, &r).await;
    sim.shutdown().await;
}

/// The reconciliation door marks a refund as the webhook door does: one
/// the gateway made while we hold it declined counts as refunded; one it
/// failed while we hold it approved frees its amount. Each once.
async fn refunds_the_gateway_settled_the_other_way_are_marked(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let gw = sim_gateway(&sim.url());
    let charge = charged(&db.store, &gw, "marks-1", 5_000).await;
    let charge_id = charge.gateway_charge_id.clone().unwrap();
    let refund_there = |key: Option<uuid::Uuid>, amount: i64| Injection {
        kind: "refund".into(),
        charge_id: Some(charge_id.clone()),
        ..charge_injection("marks-1", amount, key)
    };
    let declined_here = |amount| {
        let store = db.store.clone();
        async move {
            let asked = ask_refund(&store, charge.id, amount, "test").await;
            let r = store.load(asked.refund_id).await.unwrap().0;
            let r = step(&store, &r, Event::Claim, None).await;
            step(&store, &r, Event::Declined, Some("expired_card")).await
        }
    };
    // Declined here, made at the gateway under its key.
    let made = declined_here(400).await;
    let there: RefundEntry =
        inject(&sim.url(), &refund_there(Some(made.idempotency_key), 400)).await;
    assert!(there.is_approved());
    // The same, but finance has already resolved its case: finance settled
    // it with the gateway, so the books are not changed behind its back.
    let settled = declined_here(200).await;
    let there_too: RefundEntry = inject(
        &sim.url(),
        &refund_there(Some(settled.idempotency_key), 200),
    )
    .await;
    let finding = cobro::domain::Finding {
        kind: CaseKind::UnmatchedRefund,
        dedupe_key: format!("unmatched_refund:{}", there_too.refund_id),
        order_id: Some("marks-1".into()),
        attempt_id: Some(settled.id),
        gateway_ref: Some(there_too.refund_id.clone()),
        details: serde_json::json!({"reason": "seen in the dashboard"}),
    };
    let case = db
        .store
        .record_cases(&around_now(), &[finding])
        .await
        .unwrap()[0]
        .id;
    db.store
        .resolve_case(case, "ana", "refunded by hand; nothing to do")
        .await
        .unwrap();
    // Approved here, failed at the gateway (nothing left of the charge
    // there once someone else refunded the rest).
    let asked = ask_refund(&db.store, charge.id, 300, "test").await;
    let failed = db.store.load(asked.refund_id).await.unwrap().0;
    let failed = step(&db.store, &failed, Event::Claim, None).await;
    step(&db.store, &failed, Event::Approved, Some("re_said_ok")).await;
    inject::<RefundEntry>(&sim.url(), &refund_there(None, 4_400)).await;
    let refused: RefundEntry =
        inject(&sim.url(), &refund_there(Some(failed.idempotency_key), 300)).await;
    assert!(!refused.is_approved());

    let r = run(&db.store, &gw).await;
    let mut marked = r.refunds_marked.clone();
    marked.sort();
    let mut want = vec![made.id, failed.id];
    want.sort();
    assert_eq!(marked, want, "{r:#?}");
    let last_cause = |id| {
        let store = db.store.clone();
        async move {
            store
                .transitions(id)
                .await
                .unwrap()
                .last()
                .unwrap()
                .cause
                .clone()
        }
    };
    assert_eq!(last_cause(made.id).await, "refund_made_after_decline");
    assert_eq!(last_cause(failed.id).await, "refund_failed_after_success");
    assert_eq!(
        last_cause(settled.id).await,
        "test",
        "its case was resolved"
    );
    let made_case = db.store.open_cases().await.unwrap();
    let made_case = made_case
        .iter()
        .find(|c| c.attempt_id == Some(made.id))
        .expect("the made refund's case");
    let reason = made_case.details["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("it is marked made"), "{reason}");
    let keys = open_dedupe_keys(&db.store).await;
    assert!(
        keys.contains(&format!("unmatched_refund:{}", there.refund_id)),
        "{keys:?}"
    );
    assert!(
        keys.contains(&format!("missing_at_gateway:{}", failed.id)),
        "{keys:?}"
    );
    // What is left to refund, in the database's count: 5,000 less the 400
    // made; the 300 that failed is free again (and the 200 finance settled
    // stays declined).
    let ask = |amount| {
        let store = db.store.clone();
        async move {
            store
                .request_refund(
                    charge.id,
                    cobro::domain::Amount::parse(amount).unwrap(),
                    cobro::domain::IdempotencyKey::generate(),
                    "test",
                )
                .await
        }
    };
    let over = ask(4_601).await;
    assert!(
        matches!(over, Err(cobro::store::RefundError::ExceedsCapture(_))),
        "{over:?}"
    );
    ask(4_600).await.expect("the 300 that failed is free again");
    // A second run marks nothing again.
    let logs = (
        db.store.transitions(made.id).await.unwrap().len(),
        db.store.transitions(failed.id).await.unwrap().len(),
    );
    let again = run(&db.store, &gw).await;
    assert!(again.refunds_marked.is_empty(), "{again:#?}");
    assert_eq!(
        logs,
        (
            db.store.transitions(made.id).await.unwrap().len(),
            db.store.transitions(failed.id).await.unwrap().len(),
        )
    );
    sim.shutdown().await;
}

async fn an_unknown_attempt_approved_at_the_gateway_is_settled_not_escalated(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let gw = sim_gateway(&sim.url());
    // Sent, then the answer was lost: DESCONOCIDO. Another one ran out of
    // checks: EN_REVISION. The gateway approved both under their keys.
    let unknown = pending(&db.store, "settle-1", 1_234).await;
    let unknown = step(&db.store, &unknown, Event::Claim, None).await;
    let unknown = step(&db.store, &unknown, Event::Unknown, None).await;
    let review = pending(&db.store, "settle-2", 777).await;
    let review = step(&db.store, &review, Event::Claim, None).await;
    let review = step(&db.store, &review, Event::Unknown, None).await;
    let review = step(&db.store, &review, Event::ChecksExhausted, None).await;
    assert_eq!(
        (unknown.state, review.state),
        (State::Desconocido, State::EnRevision)
    );
    let mut there = Vec::new();
    for a in [&unknown, &review] {
        let inj = charge_injection(&a.order_id, a.amount_minor, Some(a.idempotency_key));
        there.push(inject::<LedgerEntry>(&sim.url(), &inj).await.charge_id);
    }

    let r = run(&db.store, &gw).await;
    assert!(r.cases.is_empty(), "settled, not escalated: {r:#?}");
    let settled: Vec<_> = r.resolved.iter().map(|l| (l.attempt_id, l.from)).collect();
    assert_eq!(
        settled,
        [
            (unknown.id, State::Desconocido),
            (review.id, State::EnRevision)
        ]
    );
    for (a, id) in [&unknown, &review].into_iter().zip(&there) {
        let now = db.store.load(a.id).await.unwrap().0;
        assert_eq!(now.state, State::Aprobado);
        assert_eq!(now.gateway_charge_id.as_ref(), Some(id));
        assert_eq!(now.next_action_at, None, "nothing left to do");
        let log = db.store.transitions(a.id).await.unwrap();
        let last = log.last().unwrap();
        assert_eq!(
            (
                last.cause.as_str(),
                last.actor.as_str(),
                last.to_state.as_str()
            ),
            ("reconciliation_approved", "reconciler", "APROBADO")
        );
        let evidence = last.evidence.as_ref().unwrap();
        assert_eq!(evidence["call"], "reconciliation");
    }
    assert_rerun_opens_nothing(&db.store, &gw, &r).await;
    sim.shutdown().await;
}

async fn a_failed_listing_opens_nothing(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let gw = sim_gateway(&sim.url());
    inject::<LedgerEntry>(&sim.url(), &charge_injection("nobody-2", 500, None)).await;
    let unknown = pending(&db.store, "settle-3", 900).await;
    let unknown = step(&db.store, &unknown, Event::Claim, None).await;
    let unknown = step(&db.store, &unknown, Event::Unknown, None).await;
    let inj = charge_injection("settle-3", 900, Some(unknown.idempotency_key));
    inject::<LedgerEntry>(&sim.url(), &inj).await;
    set_faults(&sim.url(), &outage()).await;

    let err = reconcile(&db.store, &gw, &around_now()).await.unwrap_err();
    assert!(matches!(err, ReconError::Listing(_)), "{err:?}");
    assert!(err.to_string().contains("nothing was opened"), "{err}");
    assert!(db.store.all_cases().await.unwrap().is_empty());
    let still = db.store.load(unknown.id).await.unwrap().0;
    assert_eq!(still.state, State::Desconocido, "nothing settled either");

    // The gateway back: the same window finds and settles it all.
    set_faults(&sim.url(), &Faults::default()).await;
    let r = run(&db.store, &gw).await;
    assert_eq!(opened(&r), [CaseKind::UnmatchedCharge]);
    assert_eq!(r.resolved.len(), 1);
    sim.shutdown().await;
}
