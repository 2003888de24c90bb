//! Finance's decline of a charge or refund that was sent: the gateway may
//! still be executing it (a dashboard shows a request only once it has
//! executed), and a declined refund frees its amount to be refunded again.
//! Still being checked, the decline is refused, saying why; in review it is
//! asked for, and the review janitor records what the gateway says: what
//! it made (`APROBADO`, not declined), its decline, or no record of it
//! longer than the gateway's processing time after the last send
//! (declined). Only an attempt never sent is declined at once. (A
//! PaymentIntent that may still succeed: `late_changes.rs`.)

use std::sync::Arc;
use std::time::Duration;

use cobro::domain::{Amount, ChargeRequest, Currency, IdempotencyKey, OrderId};
use cobro::engine::Engine;
use cobro::finance::{self, Resolution, ResolveError, ResolveRequest};
use cobro::gateway::HttpGateway;
use cobro::state::{Event, State};
use cobro::store::{Applied, Attempt, Change};

use super::common::{self, TestDb, ask_refund, enqueued, step};

on_both_dbs!(
    finance_declines_a_sent_charge_only_on_the_gateways_word,
    finance_declines_a_sent_refund_only_on_the_gateways_word,
);

/// Finance's decline of `a` with `code`, as luis, with `note`.
fn decline<'a>(a: &Attempt, code: &str, note: &'a str) -> ResolveRequest<'a> {
    ResolveRequest {
        attempt_id: a.id,
        version: a.version,
        resolution: Resolution::Decline { code: code.into() },
        by: "luis",
        note,
    }
}

/// A worker whose gateway (`gw`) shows what it executed within
/// `max_processing` of the send.
fn engine(db: &TestDb, gw: &Arc<HttpGateway>, max_processing: Duration) -> Engine {
    let mut cfg = common::engine_config("w", Default::default());
    cfg.not_found.max_processing = max_processing;
    Engine::new(db.store.clone(), gw.clone(), cfg)
}

/// Finance's `decline` of `a`, a `what` (charge or refund) that was sent,
/// in doubt: refused while it is still being checked, saying to wait for
/// review; once in review, asked for and nothing recorded. `a` in review.
async fn asked_for_in_review<'n>(
    db: &TestDb,
    a: &Attempt,
    what: &str,
    decline: &impl Fn(&Attempt) -> ResolveRequest<'n>,
) -> Attempt {
    match finance::resolve(&db.store, &decline(a)).await {
        Err(ResolveError::OpenAtGateway(msg)) => assert!(
            msg.contains(&format!("a {what} that was sent"))
                && msg.contains("once it is in EN_REVISION"),
            "{msg}"
        ),
        other => panic!("a sent {what} in doubt declined outright: {other:?}"),
    }
    let a = step(&db.store, a, Event::ChecksExhausted, None).await;
    let asked = finance::resolve(&db.store, &decline(&a)).await.unwrap();
    assert_eq!(
        (asked.state, asked.decline_code.as_deref()),
        (State::EnRevision, None),
        "asked for, not recorded"
    );
    a
}

/// A decline asked for of attempt `id`, which the gateway never executed:
/// too soon after the send (the gateway may not show it yet) its lookup's
/// "not found" leaves it in review; long after, it is declined
/// (`not_found_at_gateway`, cause `finance_decline_confirmed`).
async fn confirmed_long_after_the_send(
    db: &TestDb,
    engine: &impl Fn(Duration) -> Engine,
    id: uuid::Uuid,
) {
    engine(Duration::from_secs(60)).process(id).await.unwrap();
    let waiting = db.store.load(id).await.unwrap().0;
    assert_eq!(
        (waiting.state, waiting.decline_code),
        (State::EnRevision, None)
    );
    let looked = db.store.checks(id).await.unwrap();
    assert_eq!(
        looked.last().map(|c| c.lookup_result.as_str()),
        Some("not_found"),
        "{looked:?}"
    );
    common::due_now(db, id).await;
    engine(Duration::ZERO).process(id).await.unwrap();
    let declined = db.store.load(id).await.unwrap().0;
    assert_eq!(
        (declined.state, declined.decline_code.as_deref()),
        (State::Rechazado, Some("not_found_at_gateway"))
    );
    let last = db.store.transitions(id).await.unwrap().pop().unwrap();
    assert_eq!(last.cause, "finance_decline_confirmed");
}

/// A 49.90 EUR charge of `order`, sent by a worker whose answer was lost:
/// `DESCONOCIDO`.
async fn sent_in_doubt(db: &TestDb, order: &str) -> Attempt {
    let req = ChargeRequest::parse(order, 4_990, "EUR", None, None).unwrap();
    let a = enqueued(&db.store, &req).await;
    let a = claimed(&db.store, &a).await;
    step(&db.store, &a, Event::Unknown, None).await
}

/// A sent charge (a one-step gateway: no payment object) in doubt, then in
/// review: finance's decline waits for the gateway's word. Made at the
/// gateway (its answer lost), it is `APROBADO`; never made, it is declined
/// only once a lookup long after the send finds nothing. A charge never
/// sent is declined at once.
async fn finance_declines_a_sent_charge_only_on_the_gateways_word(db: &TestDb) {
    use cobro::gateway::{ChargeCall, ChargeOutcome, Gateway};
    let sim = common::start_sim(true, cobro::sim::Faults::default()).await;
    let gw = Arc::new(common::sim_gateway(&sim.url()));
    let decline = |a: &Attempt| decline(a, "no_charge_found", "the dashboard shows no charge");
    let engine = |max_processing| engine(db, &gw, max_processing);

    // Sent and charged at the gateway, its answer lost.
    let a = sent_in_doubt(db, "charge-doubt-1").await;
    let call = ChargeCall {
        key: IdempotencyKey::from_uuid(a.idempotency_key),
        attempt_id: None,
        order_id: OrderId::parse("charge-doubt-1").unwrap(),
        amount: Amount::parse(4_990).unwrap(),
        currency: Currency::parse("EUR").unwrap(),
        payment_method: None,
        customer: None,
        gateway_ref: None,
        merchant_initiated: false,
    };
    assert!(matches!(
        gw.charge(&call).await,
        ChargeOutcome::Approved { .. }
    ));
    let a = asked_for_in_review(db, &a, "charge", &decline).await;
    engine(Duration::ZERO).process(a.id).await.unwrap();
    let made = db.store.load(a.id).await.unwrap().0;
    assert_eq!(
        made.state,
        State::Aprobado,
        "the gateway charged it: not declined"
    );

    // Sent, never executed at the gateway.
    let a = sent_in_doubt(db, "charge-doubt-2").await;
    let a = step(&db.store, &a, Event::ChecksExhausted, None).await;
    finance::resolve(&db.store, &decline(&a)).await.unwrap();
    confirmed_long_after_the_send(db, &engine, a.id).await;

    // Never sent (no worker could send it): declined at once.
    let req = ChargeRequest::parse("charge-unsent", 4_990, "EUR", None, None).unwrap();
    let a = enqueued(&db.store, &req).await;
    let a = step(&db.store, &a, Event::Unsendable, None).await;
    assert_eq!((a.state, a.send_count), (State::EnRevision, 0));
    let declined = finance::resolve(&db.store, &decline(&a)).await.unwrap();
    assert_eq!(
        (declined.state, declined.decline_code.as_deref()),
        (State::Rechazado, Some("no_charge_found"))
    );
    let entries = common::ledger(&sim.url()).await.entries;
    assert_eq!(
        entries.len(),
        1,
        "one charge made at the gateway: {entries:?}"
    );
    sim.shutdown().await;
}

/// Review of refunds (stop 40): finance's decline of a refund that was
/// sent would free its amount while the gateway may still make it. Still
/// being checked it is refused, saying why; in review it is asked for, and
/// the janitor records what the gateway says: the refund it made
/// (`APROBADO`, not declined), or no record of one long after the send
/// (declined, its amount free again).
async fn finance_declines_a_sent_refund_only_on_the_gateways_word(db: &TestDb) {
    use cobro::gateway::{ChargeOutcome, Gateway, RefundCall};
    let sim = common::start_sim(true, cobro::sim::Faults::default()).await;
    let gw = Arc::new(common::sim_gateway(&sim.url()));
    let decline = |a: &Attempt| {
        decline(
            a,
            "customer_says_not_refunded",
            "the dashboard shows no refund",
        )
    };
    let engine = |max_processing| engine(db, &gw, max_processing);
    // A refund sent, made at the gateway, its answer lost; then in review.
    let charge = common::charged(&db.store, &gw, "refund-doubt-1", 3_000).await;
    let r = ask_refund(&db.store, charge.id, 3_000, "app").await;
    let r = db.store.load(r.refund_id).await.unwrap().0;
    let r = claimed(&db.store, &r).await;
    let call = RefundCall {
        key: IdempotencyKey::from_uuid(r.idempotency_key),
        charge_id: charge.gateway_charge_id.clone().unwrap(),
        order_id: cobro::domain::OrderId::parse("refund-doubt-1").unwrap(),
        amount: cobro::domain::Amount::parse(3_000).unwrap(),
        currency: cobro::domain::Currency::parse("EUR").unwrap(),
    };
    assert!(matches!(
        gw.refund(&call).await,
        ChargeOutcome::Approved { .. }
    ));
    let r = step(&db.store, &r, Event::Unknown, None).await;
    let r = asked_for_in_review(db, &r, "refund", &decline).await;
    assert!(
        ask_refund_err(&db.store, charge.id).await,
        "its amount stays held meanwhile"
    );
    engine(Duration::ZERO).process(r.id).await.unwrap();
    let made = db.store.load(r.id).await.unwrap().0;
    assert_eq!(
        made.state,
        State::Aprobado,
        "the gateway made it: not declined"
    );

    // A refund claimed but never made at the gateway: declined once the
    // gateway has no record of it long after the send.
    let charge = common::charged(&db.store, &gw, "refund-doubt-2", 2_000).await;
    let r = ask_refund(&db.store, charge.id, 2_000, "app").await;
    let r = db.store.load(r.refund_id).await.unwrap().0;
    let r = claimed(&db.store, &r).await;
    let r = step(&db.store, &r, Event::Unknown, None).await;
    let r = step(&db.store, &r, Event::ChecksExhausted, None).await;
    finance::resolve(&db.store, &decline(&r)).await.unwrap();
    confirmed_long_after_the_send(db, &engine, r.id).await;
    ask_refund(&db.store, charge.id, 2_000, "app").await;
    let refunds = common::ledger(&sim.url()).await.refunds;
    assert_eq!(
        refunds.len(),
        1,
        "one refund made at the gateway: {refunds:?}"
    );
    sim.shutdown().await;
}

/// A worker's claim of `a`: its lease, and one more send.
async fn claimed(store: &cobro::store::Store, a: &Attempt) -> Attempt {
    let mut claim = Change::new(Some(Event::Claim), "claim", "worker:w");
    claim.lease = cobro::store::Lease::Take {
        owner: "w",
        ttl: std::time::Duration::from_secs(30),
    };
    claim.add_send = true;
    let Applied::Moved(a) = store.apply(a, &claim).await.unwrap() else {
        panic!("the claim lost a race nobody runs");
    };
    *a
}

/// Whether a refund of one cent of `charge` is refused (nothing left).
async fn ask_refund_err(store: &cobro::store::Store, charge: uuid::Uuid) -> bool {
    store
        .request_refund(
            charge,
            cobro::domain::Amount::parse(1).unwrap(),
            IdempotencyKey::generate(),
            "app",
        )
        .await
        .is_err()
}
