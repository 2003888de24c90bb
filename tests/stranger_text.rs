//! A gateway's words are a stranger's input (issue 27): a decline whose
//! code and message carry NUL and run to 100 KB, from a real HTTP server on
//! 127.0.0.1, settles the attempt `RECHAZADO` with a bounded, NUL-free
//! decline code and evidence (PostgreSQL's `text` and `jsonb` cannot hold a
//! NUL: the write used to fail, again and again, until the attempt was
//! quarantined). An approval whose charge id cannot be stored as it is is
//! not recorded as one with an altered id: it is unknown (`DESCONOCIDO`)
//! and looked up. Both backends, through a real engine.

#[macro_use]
mod common;

use axum::http::{Method, StatusCode};
use cobro::domain::ChargeRequest;
use cobro::state::State;
use common::*;
use serde_json::{Value, json};

on_both_dbs!(
    a_decline_carrying_nul_and_100_kb_settles_rechazado_bounded_and_nul_free,
    an_approval_whose_charge_id_carries_nul_is_unknown_never_approved_with_another_id,
);

/// A gateway on 127.0.0.1 that answers every charge (`POST`) with
/// `charge` and every lookup (`GET`) with `lookup`.
async fn gateway(charge: (u16, Value), lookup: (u16, Value)) -> String {
    let app = axum::Router::new().fallback(move |method: Method| {
        let (status, body) = if method == Method::POST {
            charge.clone()
        } else {
            lookup.clone()
        };
        async move { (StatusCode::from_u16(status).unwrap(), axum::Json(body)) }
    });
    stand_in(app).await
}

/// No text anywhere in `v` holds a NUL.
fn no_nul(v: &Value) -> bool {
    match v {
        Value::String(s) => !s.contains('\0'),
        Value::Array(a) => a.iter().all(no_nul),
        Value::Object(o) => o.iter().all(|(k, v)| !k.contains('\0') && no_nul(v)),
        _ => true,
    }
}

/// About 100 KB, a NUL every 26 bytes.
fn long_nul_text() -> String {
    "Tarjeta rechazada, lo\0 siento. ".repeat(3_300)
}

async fn a_decline_carrying_nul_and_100_kb_settles_rechazado_bounded_and_nul_free(db: &TestDb) {
    let long = long_nul_text();
    assert!(long.len() >= 100_000);
    let decline = json!({"status": "declined", "decline_code": format!("card\0declined{long}"),
                         "error": long, "charge_id": "ch_nul_decline"});
    let url = gateway((402, decline.clone()), (200, decline)).await;
    let req = ChargeRequest::parse("text-1", 1_999, "USD", None, None).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;

    engine(&db.store, &url, "text-w").process(id).await.unwrap();

    let (a, _) = db.store.load(id).await.unwrap();
    assert_eq!(a.state, State::Rechazado, "settled, not quarantined");
    let code = a.decline_code.expect("a decline code");
    assert!(code.len() <= 64, "{} bytes: {code}", code.len());
    assert!(!code.contains('\0'), "{code}");
    assert!(code.starts_with(r"card\u0000declinedTarjeta"), "{code}");
    assert!(code.ends_with('…'), "marked as cut: {code}");
    assert_eq!(a.gateway_charge_id.as_deref(), Some("ch_nul_decline"));
    assert_eq!(
        path(&db.store, id).await,
        ["PENDIENTE", "EN_PROCESO", "RECHAZADO"]
    );
    let log = db.store.transitions(id).await.unwrap();
    let last = log.last().unwrap();
    assert_eq!(last.cause, "gateway_declined");
    let evidence = last.evidence.as_ref().expect("evidence");
    assert!(
        evidence.to_string().len() < 2_000 && no_nul(evidence),
        "{evidence}"
    );
}

async fn an_approval_whose_charge_id_carries_nul_is_unknown_never_approved_with_another_id(
    db: &TestDb,
) {
    let approved = json!({"status": "approved", "charge_id": "ch_\0real"});
    let url = gateway((200, approved.clone()), (200, approved)).await;
    let req = ChargeRequest::parse("text-2", 2_999, "USD", None, None).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;

    engine(&db.store, &url, "text-w").process(id).await.unwrap();

    let (a, _) = db.store.load(id).await.unwrap();
    assert_eq!(a.state, State::Desconocido, "in doubt, looked up");
    assert!(a.check_count >= 1, "looked up at least once");
    assert_eq!(a.gateway_charge_id, None, "no altered id was stored");
    let p = path(&db.store, id).await;
    assert!(
        !p.iter().any(|s| s == "APROBADO" || s == "RECHAZADO"),
        "{p:?}"
    );
    let log = db.store.transitions(id).await.unwrap();
    let unknown = log
        .iter()
        .find(|t| t.cause == "gateway_unknown")
        .expect("recorded as unknown");
    let evidence = unknown.evidence.as_ref().unwrap();
    assert!(no_nul(evidence), "{evidence}");
    assert_eq!(evidence["error_kind"], "bad_body");
    assert!(
        evidence["detail"]
            .as_str()
            .unwrap()
            .contains(r"charge_id holds the control character U+0000: ch_\u0000real"),
        "{evidence}"
    );
}
