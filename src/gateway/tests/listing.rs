//! The HTTP adapter's listing against a real simulator on 127.0.0.1: every
//! page walked, the window half-open, refunds with their charge, and a
//! failed listing an error (never an empty list); and against a gateway
//! whose pages never end, an error at the page cap (never a list cut
//! short).
//!
//! Invariant: each test starts its own simulator or server and talks to it
//! only over HTTP (the adapter, or reqwest for `/control/*` and `/ledger`).

use chrono::{DateTime, TimeDelta, Utc};

use super::*;
use crate::sim::{Faults, Injection, LedgerEntry, SimHandle};

fn injection(order: &str, at: DateTime<Utc>) -> Injection {
    Injection {
        kind: "charge".into(),
        idempotency_key: None,
        order_id: order.into(),
        amount_minor: 1000,
        currency: "EUR".into(),
        decline_code: None,
        charge_id: None,
        at: Some(at),
    }
}

async fn inject(sim: &SimHandle, inj: &Injection) -> TestResult<LedgerEntry> {
    Ok(reqwest::Client::new()
        .post(format!("{}/control/inject", sim.url()))
        .json(inj)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?)
}

#[tokio::test]
async fn listing_walks_every_page_of_the_half_open_window() -> TestResult {
    let sim = start_sim().await?;
    let gw = gateway(&sim)?;
    let from = Utc::now() - TimeDelta::hours(1);
    let to = from + TimeDelta::hours(2);
    let edge_in = inject(&sim, &injection("edge-from", from)).await?;
    for i in 0..249 {
        inject(
            &sim,
            &injection(&format!("order-{i}"), from + TimeDelta::seconds(i)),
        )
        .await?;
    }
    inject(&sim, &injection("edge-to", to)).await?;
    inject(&sim, &injection("days-ago", from - TimeDelta::days(2))).await?;

    let listed = gw.list(Listed::Charges, from, to).await?;
    assert_eq!(listed.len(), 250, "[from, to): the start in, the end out");
    assert_eq!(listed[0].id, edge_in.charge_id);
    assert!(
        listed
            .iter()
            .all(|r| r.kind == Listed::Charges && r.is_approved())
    );
    let mut ids: Vec<&str> = listed.iter().map(|r| r.id.as_str()).collect();
    let in_order = ids.clone();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 250, "every record once");
    assert_eq!(in_order, ids, "in the gateway's (seq) order");
    assert_eq!(ledger(&sim).await?.stats.list_requests, 3, "pages of 100");
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn refunds_are_listed_with_the_charge_they_refund() -> TestResult {
    let sim = start_sim().await?;
    let gw = gateway(&sim)?;
    let from = Utc::now() - TimeDelta::minutes(5);
    let charge = inject(&sim, &injection("order-r", Utc::now())).await?;
    let refund = Injection {
        kind: "refund".into(),
        amount_minor: 300,
        charge_id: Some(charge.charge_id.clone()),
        ..injection("order-r", Utc::now())
    };
    reqwest::Client::new()
        .post(format!("{}/control/inject", sim.url()))
        .json(&refund)
        .send()
        .await?
        .error_for_status()?;
    let to = Utc::now() + TimeDelta::minutes(5);
    let refunds = gw.list(Listed::Refunds, from, to).await?;
    assert_eq!(refunds.len(), 1);
    let r = &refunds[0];
    assert!(r.id.starts_with("re_") && r.is_approved(), "{r:?}");
    assert_eq!(r.charge_id.as_deref(), Some(charge.charge_id.as_str()));
    assert_eq!((r.amount_minor, r.order_id.as_str()), (300, "order-r"));
    let charges = gw.list(Listed::Charges, from, to).await?;
    assert_eq!(charges.len(), 1, "a refund is not a charge");
    assert_eq!(charges[0].charge_id, None);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_failed_listing_is_an_error_never_an_empty_list() -> TestResult {
    let sim = start_sim().await?;
    let gw = gateway(&sim)?;
    inject(&sim, &injection("order-x", Utc::now())).await?;
    reqwest::Client::new()
        .put(format!("{}/control/faults", sim.url()))
        .json(&Faults {
            outage: true,
            ..Faults::default()
        })
        .send()
        .await?
        .error_for_status()?;
    let (from, to) = (Utc::now() - TimeDelta::hours(1), Utc::now());
    let err = gw.list(Listed::Charges, from, to).await.unwrap_err();
    assert_eq!(
        err,
        ListError::Status {
            kind: Listed::Charges,
            status: 503
        }
    );
    let url = sim.url();
    sim.shutdown().await;
    let err = gateway_at(&url)?
        .list(Listed::Refunds, from, to)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            ListError::Transport {
                kind: Listed::Refunds,
                ..
            }
        ),
        "{err:?}"
    );
    Ok(())
}

/// A gateway on 127.0.0.1 whose listing never ends: every page holds one
/// new charge and says `has_more`. Counts the pages it served.
async fn endless_listing() -> TestResult<(String, std::sync::Arc<std::sync::atomic::AtomicUsize>)> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let pages = Arc::new(AtomicUsize::new(0));
    let served = pages.clone();
    let app = axum::Router::new().fallback(move || {
        let n = served.fetch_add(1, Ordering::SeqCst);
        async move {
            axum::Json(serde_json::json!({"has_more": true, "data": [{
                "charge_id": format!("ch_{n}"), "idempotency_key": format!("k{n}"),
                "order_id": "o", "amount_minor": 1, "currency": "EUR",
                "status": "approved", "at": "2026-11-30T12:00:00Z"}]}))
        }
    });
    Ok((serve(app).await?, pages))
}

#[tokio::test]
async fn a_listing_that_never_ends_fails_at_the_page_cap_never_cut_short() -> TestResult {
    let (url, pages) = endless_listing().await?;
    let gw = gateway_at(&url)?;
    let (from, to) = (Utc::now() - TimeDelta::hours(1), Utc::now());
    let listed = tokio::time::timeout(Duration::from_secs(120), gw.list(Listed::Charges, from, to))
        .await
        .map_err(|_| "the listing is still paging after 2 minutes: it has no bound")?;
    let err = listed.unwrap_err();
    assert_eq!(
        err.to_string(),
        "listing charges failed: more than 10000 pages of 100, and the gateway still says there are more"
    );
    assert_eq!(
        pages.load(std::sync::atomic::Ordering::SeqCst),
        10_000,
        "not a page more"
    );
    Ok(())
}
