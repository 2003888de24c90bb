//! The incident switch (`POST /control/pause`, `cobro pause`): while it is
//! on, no new charge reaches the gateway and lookups go on; it shows on
//! finance's page, in `/metrics` and in its history; on resume what waited
//! is sent, once. On both backends, with a worker and the simulator.

#[macro_use]
mod common;

use std::time::Duration;

use cobro::domain::ChargeRequest;
use cobro::sim::Faults;
use cobro::state::State;
use common::*;

on_both_dbs!(pausing_stops_new_charges_lookups_go_on_and_resume_sends_once,);

async fn post(
    web: &Web,
    path: &str,
    key: &str,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    post_json(&format!("{}{path}", web.url), As::Bearer(key), &body).await
}

async fn pausing_stops_new_charges_lookups_go_on_and_resume_sends_once(db: &TestDb) {
    // Every answer is lost after the charge: an attempt goes DESCONOCIDO
    // and its lookup (2 s later) finds the charge.
    let sim = start_sim(true, answers_lost()).await;
    let mut args = worker_args(&db.url, &sim.url());
    args.check_schedule = "2s,2s,2s,2s,2s".into();
    args.check_jitter = 0.0;
    let worker = spawn_worker(args);
    let web = web_on(&db.store).await;

    let in_doubt = ChargeRequest::parse("pause-doubt", 1_100, "EUR", None, None).unwrap();
    let doubt = db.store.enqueue(&in_doubt).await.unwrap().attempt_id;
    settled(
        &db.store,
        doubt,
        State::Desconocido,
        Duration::from_secs(10),
    )
    .await;

    // The incident: pause, and say why. The app key may not.
    let (status, _) = post(
        &web,
        "/control/pause",
        "app",
        serde_json::json!({"reason": "x"}),
    )
    .await;
    assert_eq!(status, 403, "charges:write cannot pause");
    let (status, body) = post(&web, "/control/pause", "ana", serde_json::json!({})).await;
    assert_refused(status, &body, 422, "reason");
    let (status, body) = post(
        &web,
        "/control/pause",
        "ana",
        serde_json::json!({"reason": "the gateway double-charges, INC-7"}),
    )
    .await;
    assert_eq!(
        (status, body["paused"].as_bool()),
        (200, Some(true)),
        "{body}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await; // > the workers' 100 ms poll

    let new = ChargeRequest::parse("pause-new", 2_200, "EUR", None, None).unwrap();
    let fresh = db.store.enqueue(&new).await.unwrap().attempt_id;
    // The lookup goes on and settles the attempt in doubt...
    settled(&db.store, doubt, State::Aprobado, Duration::from_secs(10)).await;
    let paused_at = db.store.pause_state().await.unwrap().unwrap().changed_at;
    let approved_at = db.store.transitions(doubt).await.unwrap().pop().unwrap().at;
    assert!(
        approved_at > paused_at,
        "looked up while paused ({approved_at} > {paused_at})"
    );
    // ...while the new charge waits, parked, never sent.
    let waiting = eventually(Duration::from_secs(5), "the new charge parked", || async {
        let (a, _) = db.store.load(fresh).await.unwrap();
        a.parked_since.is_some().then_some(a)
    })
    .await;
    assert_eq!((waiting.state, waiting.send_count), (State::Pendiente, 0));
    let at_gateway = ledger(&sim.url()).await;
    assert_eq!(
        at_gateway.entries_for_key(&new.key.to_string()).count(),
        0,
        "nothing sent while paused"
    );

    // Everyone can see it.
    let page = get_text(&format!("{}/finance", web.url), As::Basic("ana")).await;
    assert!(
        page.contains("id=\"paused\"") && page.contains("INC-7"),
        "the banner on finance's page"
    );
    for path in [
        "/finance/summary".to_owned(),
        format!("/finance/attempts/{fresh}"),
    ] {
        let other = get_text(&format!("{}{path}", web.url), As::Basic("ana")).await;
        assert!(other.contains("id=\"paused\""), "the banner on {path}");
    }
    let metrics = web.metrics().await;
    assert!(
        metrics.lines().any(|l| l == "cobro_sending_paused 1"),
        "the gauge"
    );

    // Resume: the waiting charge is sent, once.
    set_faults(&sim.url(), &Faults::default()).await;
    let (status, body) = post(&web, "/control/resume", "ana", serde_json::json!({})).await;
    assert_eq!((status, body["paused"].as_bool()), (200, Some(false)));
    settled(&db.store, fresh, State::Aprobado, Duration::from_secs(10)).await;
    let at_gateway = ledger(&sim.url()).await;
    assert_eq!(at_gateway.entries_for_key(&new.key.to_string()).count(), 1);
    let history = db
        .scalar(
            "SELECT count(*) FROM cobro.pause_events WHERE actor = 'api:ana'",
            "SELECT count(*) FROM pause_events WHERE actor = 'api:ana'",
        )
        .await;
    assert_eq!(history, 2, "both changes on the record, with who");
    web.stop().await;
    worker.stop().await;
}
