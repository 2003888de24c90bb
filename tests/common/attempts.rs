//! Attempts moved by hand, as a worker would move them, through the
//! store's compare-and-set writer: one event at a time (with or without the
//! gateway's evidence), to `EN_REVISION`, declined with a retry scheduled,
//! charged at the simulator and recorded, refunds asked for, a retry made
//! due, finance's "check again now", a raw SQL move that writes its log
//! row as a careful door would; and
//! what a test reads back (the states an attempt went through and why, the
//! open cases, waiting for a state).

use std::time::Duration;

use cobro::store::Store;
use uuid::Uuid;

use super::{TestDb, eventually};

/// Enqueues `req`; its attempt as stored.
pub async fn enqueued(store: &Store, req: &cobro::domain::ChargeRequest) -> cobro::store::Attempt {
    let id = store.enqueue(req).await.unwrap().attempt_id;
    store.load(id).await.unwrap().0
}

/// Finance's "check again now" of `a`, in review, at the version `a`
/// carries, by `ana` with `note`: the attempt, `DESCONOCIDO` now, waits
/// for a worker's lookup.
pub async fn check_now(
    store: &Store,
    a: &cobro::store::Attempt,
    note: &str,
) -> cobro::store::Attempt {
    use cobro::finance::{Resolution, ResolveRequest};
    let req = ResolveRequest {
        attempt_id: a.id,
        version: a.version,
        resolution: Resolution::CheckNow,
        by: "ana",
        note,
    };
    let now = cobro::finance::resolve(store, &req).await.unwrap();
    assert_eq!(
        now.state,
        cobro::state::State::Desconocido,
        "check now looks it up"
    );
    now
}

/// Moves `a` with `event` through the store's compare-and-set writer, as a
/// worker would: a Claim takes a 30 s lease and, as a Resend, counts a send;
/// ChecksExhausted counts its failed lookup as a check; `detail` is the gateway's charge id for Approved (default `ch_test`) or
/// the decline code for Declined. Panics if the write loses (no test races
/// itself).
pub async fn step(
    store: &Store,
    a: &cobro::store::Attempt,
    event: cobro::state::Event,
    detail: Option<&str>,
) -> cobro::store::Attempt {
    step_change(store, a, event, detail, None).await
}

/// [`step`] with the gateway evidence the write records.
pub async fn step_with_evidence(
    store: &Store,
    a: &cobro::store::Attempt,
    event: cobro::state::Event,
    evidence: &cobro::gateway::Evidence,
) -> cobro::store::Attempt {
    step_change(store, a, event, None, Some(evidence)).await
}

async fn step_change(
    store: &Store,
    a: &cobro::store::Attempt,
    event: cobro::state::Event,
    detail: Option<&str>,
    evidence: Option<&cobro::gateway::Evidence>,
) -> cobro::store::Attempt {
    use cobro::state::Event;
    use cobro::store::{Applied, Change, Lease};
    let mut c = Change::new(Some(event), "test", "worker:test");
    c.evidence = evidence;
    match event {
        // A send, counted as the worker counts it (at the claim).
        Event::Claim => {
            c.lease = Lease::Take {
                owner: "test",
                ttl: Duration::from_secs(30),
            };
            c.add_send = true;
        }
        Event::Resend => c.add_send = true,
        // The failed lookup that ran out of checks, counted as one.
        Event::ChecksExhausted => {
            let now = chrono::Utc::now();
            c.add_check = Some(cobro::store::CheckRecord {
                scheduled_at: now,
                started_at: now,
            });
        }
        Event::Approved => c.charge_id = Some(detail.unwrap_or("ch_test")),
        Event::Declined => c.decline_code = detail,
        _ => {}
    }
    match store.apply(a, &c).await.unwrap() {
        Applied::Moved(now) => *now,
        Applied::Lost => panic!("lost a race nobody runs"),
    }
}

/// The states attempt `id` went through, from its transition log.
pub async fn path(store: &Store, id: Uuid) -> Vec<String> {
    store
        .transitions(id)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.to_state)
        .collect()
}

/// The causes of attempt `id`'s transitions, in order.
pub async fn causes(store: &Store, id: Uuid) -> Vec<String> {
    store
        .transitions(id)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.cause)
        .collect()
}

/// Panics unless attempt `id`'s last transition was made for `cause` by
/// `actor`.
pub async fn assert_last_move(store: &Store, id: Uuid, cause: &str, actor: &str) {
    let log = store.transitions(id).await.unwrap();
    let last = log.last().expect("a transition");
    assert_eq!(
        (last.cause.as_str(), last.actor.as_str()),
        (cause, actor),
        "attempt {id}'s last move"
    );
}

/// The ids of the open reconciliation cases.
pub async fn open_case_ids(store: &Store) -> Vec<i64> {
    store
        .open_cases()
        .await
        .unwrap()
        .iter()
        .map(|c| c.id)
        .collect()
}

/// Asks for a refund of `minor` units of charge `charge` as `actor`, with a
/// new key; panics if it is refused.
pub async fn ask_refund(
    store: &Store,
    charge: Uuid,
    minor: i64,
    actor: &str,
) -> cobro::store::Refunded {
    use cobro::domain::{Amount, IdempotencyKey};
    store
        .request_refund(
            charge,
            Amount::parse(minor).unwrap(),
            IdempotencyKey::generate(),
            actor,
        )
        .await
        .unwrap()
}

/// Waits (up to `limit`) for attempt `id` to reach `want`.
pub async fn settled(
    store: &Store,
    id: Uuid,
    want: cobro::state::State,
    limit: Duration,
) -> cobro::store::Attempt {
    eventually(limit, &format!("attempt {id} to reach {want}"), || async {
        let (a, _) = store.load(id).await.unwrap();
        (a.state == want).then_some(a)
    })
    .await
}

/// Moves the attempts `which` picks (a `WHERE` condition over the attempts
/// table, the same text on both backends) to `to` by raw SQL, as a careful
/// door would: each one's transition-log row (`cause` `raw_sql`, with its
/// new version), then the `UPDATE`, in one transaction; an approval gets a
/// gateway charge id `ch_<attempt id>` unless it has one. The rows moved,
/// or the database's refusal (nothing is then written).
pub async fn raw_move(db: &TestDb, which: &str, to: &str) -> Result<u64, sqlx::Error> {
    let log = format!(
        "INSERT INTO {t}attempt_transitions (attempt_id, from_state, to_state, cause, actor, version{at})
         SELECT id, state, {to}, 'raw_sql', 'test', version + 1{now} FROM {t}payment_attempts WHERE {which}",
        t = db.sql("cobro.", ""),
        at = db.sql("", ", at"),
        now = db.sql("", ", CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"),
        to = db.sql("$1", "?1"),
    );
    let update = format!(
        "UPDATE {t}payment_attempts SET state = {to}, version = version + 1,
                gateway_charge_id = CASE WHEN {to} = 'APROBADO'
                                         THEN COALESCE(gateway_charge_id, 'ch_' || id{cast})
                                         ELSE gateway_charge_id END
          WHERE {which}",
        t = db.sql("cobro.", ""),
        to = db.sql("$1", "?1"),
        cast = db.sql("::text", ""),
    );
    let rows = db.in_one_tx(&[&log, &update], &[to]).await?;
    Ok(rows[1])
}

/// A raw send of attempt `id` (its move to `EN_PROCESO`, log row
/// written, as [`raw_move`] makes it) is refused by the charge rule: the
/// order may have been charged (CB011).
pub async fn raw_send_is_held(db: &TestDb, id: Uuid) {
    let raw = raw_move(db, &format!("id = '{id}'"), "EN_PROCESO")
        .await
        .unwrap_err();
    assert!(
        raw.to_string().contains("CB011") || raw.to_string().contains("may have charged it"),
        "{raw}"
    );
}

/// Makes attempt `id`'s next action (a declined attempt's business retry,
/// the review janitor's next check) due now and wakes it.
pub async fn due_now(db: &TestDb, id: Uuid) {
    db.exec(
        "UPDATE cobro.payment_attempts SET next_action_at = now() WHERE id = $1::uuid",
        "UPDATE payment_attempts SET next_action_at = 0 WHERE id = ?1",
        &[&id.to_string()],
    )
    .await
    .unwrap();
    db.store.wake(id).await.unwrap();
}

/// A charge for `order` (49.90 EUR) in `EN_REVISION`: [`in_review_of`].
pub async fn in_review(store: &Store, order: &str) -> cobro::store::Attempt {
    let req = cobro::domain::ChargeRequest::parse(order, 4_990, "EUR", None, None).unwrap();
    in_review_of(store, &req).await
}

/// The charge `req` enqueued and moved to `EN_REVISION` as a worker would:
/// claimed (a send counted), an unknown outcome (HTTP 503), then a failed
/// lookup (recorded as a check) that exhausts the checks.
pub async fn in_review_of(
    store: &Store,
    req: &cobro::domain::ChargeRequest,
) -> cobro::store::Attempt {
    use cobro::state::Event;
    let a = enqueued(store, req).await;
    let a = step(store, &a, Event::Claim, None).await;
    let a = step(store, &a, Event::Unknown, None).await;
    let failed_lookup = cobro::gateway::Evidence {
        call: "lookup".into(),
        http_status: Some(503),
        error_kind: "http_5xx".into(),
        lookup_result: Some("failed".into()),
        ..Default::default()
    };
    step_with_evidence(store, &a, Event::ChecksExhausted, &failed_lookup).await
}

/// A charge declined with `insufficient_funds` (3 000 USD minor units, on
/// `pm_x`), its business retry scheduled `retry_in` from now, as the worker
/// leaves it.
pub async fn declined_with_retry(
    store: &Store,
    order: &str,
    retry_in: Duration,
) -> cobro::store::Attempt {
    let req = cobro::domain::ChargeRequest::parse(order, 3_000, "USD", None, Some("pm_x")).unwrap();
    let a = enqueued(store, &req).await;
    let a = step(store, &a, cobro::state::Event::Claim, None).await;
    let a = decline_for_retry(store, &a, "insufficient_funds", retry_in).await;
    assert!(a.next_action_at.is_some(), "a retry is scheduled");
    a
}

/// Declines the claimed attempt `a` with `code` (cause `gateway_declined`),
/// its business retry scheduled `retry_in` from now, as the worker does.
pub async fn decline_for_retry(
    store: &Store,
    a: &cobro::store::Attempt,
    code: &str,
    retry_in: Duration,
) -> cobro::store::Attempt {
    use cobro::state::Event;
    use cobro::store::{Applied, Change};
    let mut decline = Change::new(Some(Event::Declined), "gateway_declined", "worker:test");
    decline.decline_code = Some(code);
    decline.act_in = Some(retry_in);
    let Applied::Moved(a) = store.apply(a, &decline).await.unwrap() else {
        panic!("not declined");
    };
    *a
}

/// A charge of `amount` EUR for `order` sent to the simulator behind `gw`
/// with its own key and recorded APROBADO, as a worker would (without
/// one): what the reconciliation and settlement tests compare against.
pub async fn charged(
    store: &Store,
    gw: &cobro::gateway::HttpGateway,
    order: &str,
    amount: i64,
) -> cobro::store::Attempt {
    use cobro::domain::{Amount, ChargeRequest, Currency, IdempotencyKey, OrderId};
    use cobro::gateway::{ChargeCall, ChargeOutcome, Gateway};
    use cobro::state::Event;
    let req = ChargeRequest::parse(order, amount, "EUR", None, None).unwrap();
    let a = enqueued(store, &req).await;
    let a = step(store, &a, Event::Claim, None).await;
    let call = ChargeCall {
        key: IdempotencyKey::from_uuid(a.idempotency_key),
        attempt_id: None,
        order_id: OrderId::parse(order).unwrap(),
        amount: Amount::parse(amount).unwrap(),
        currency: Currency::parse("EUR").unwrap(),
        payment_method: None,
        customer: None,
        gateway_ref: None,
        merchant_initiated: false,
    };
    let ChargeOutcome::Approved { charge_id, .. } = gw.charge(&call).await else {
        panic!("the simulator declined a fault-free charge");
    };
    step(store, &a, Event::Approved, Some(&charge_id)).await
}

/// Moves every attempt charged to the payment method `card` two days into
/// the past (the card networks' 24-hour window is behind them).
pub async fn two_days_ago(db: &TestDb, card: &str) {
    db.exec(
        "UPDATE cobro.payment_attempts SET created_at = created_at - interval '2 days'
          WHERE payment_method = $1",
        "UPDATE payment_attempts SET created_at = created_at - 2 * 86400000
          WHERE payment_method = ?1",
        &[card],
    )
    .await
    .unwrap();
}
