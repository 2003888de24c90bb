//! The database's truths at scrape time: the [`Scraper`] reads
//! [`Store::gauges`] at most once per TTL (concurrent scrapes wait for one
//! query) and renders them after the process' counters; when the database
//! does not answer, `cobro_database_up 0` and the counters alone. Every
//! process shows the same values (sum the counters across processes, never
//! these).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use tracing::warn;

use super::text::{escape, gauge, header};
use super::{CONTENT_TYPE_TEXT, install, recovery};
use crate::state::State;
use crate::store::{Gauges, Store};

/// The scrape of a process: its counters, then the database's gauges, read
/// at most once per `ttl` however often it is scraped (concurrent scrapes
/// wait for one query), so a scraper cannot load the database.
pub struct Scraper {
    store: Store,
    ttl: Duration,
    cached: tokio::sync::Mutex<Option<(Instant, Option<Gauges>)>>,
}

/// How long database gauges are reused by default.
pub const GAUGE_TTL: Duration = Duration::from_secs(5);

impl Scraper {
    pub fn new(store: Store, ttl: Duration) -> Self {
        install();
        Self {
            store,
            ttl,
            cached: tokio::sync::Mutex::new(None),
        }
    }

    /// The database's gauges, fresh or at most `ttl` old; `None` when the
    /// database did not answer (that too is kept for `ttl`).
    async fn gauges(&self) -> Option<Gauges> {
        let mut cached = self.cached.lock().await;
        if let Some((at, g)) = cached.as_ref()
            && at.elapsed() < self.ttl
        {
            return g.clone();
        }
        let fresh = match self.store.gauges().await {
            Ok(g) => Some(g),
            Err(e) => {
                warn!(error = %e, "metrics: the database did not answer");
                None
            }
        };
        *cached = Some((Instant::now(), fresh.clone()));
        fresh
    }

    /// The full scrape in the text format.
    pub async fn render(&self) -> String {
        let mut out = install().render();
        let gauges = self.gauges().await;
        gauge(
            &mut out,
            "cobro_database_up",
            "1 when the database answered this scrape.",
            if gauges.is_some() { 1.0 } else { 0.0 },
        );
        if let Some(g) = gauges {
            render_gauges(&mut out, &g);
        }
        out
    }

    /// `GET /metrics` as an HTTP response.
    pub async fn response(&self) -> Response {
        ([(CONTENT_TYPE, CONTENT_TYPE_TEXT)], self.render().await).into_response()
    }
}

/// Every case kind, so each series exists from the first scrape.
const CASE_KINDS: [&str; 10] = [
    "double_charge",
    "unmatched_charge",
    "unmatched_refund",
    "missing_at_gateway",
    "amount_mismatch",
    "dispute",
    "poison_wakeup",
    "unsettled",
    "fee_mismatch",
    "payout_mismatch",
];

/// The attempt kinds always shown (with 0), so every series exists.
const KINDS: [&str; 3] = ["initial", "business_retry", "refund"];

fn render_gauges(out: &mut String, g: &Gauges) {
    header(
        out,
        "cobro_attempts",
        "Attempts in the database by kind and state.",
    );
    let mut rows: Vec<(String, State, i64)> = KINDS
        .iter()
        .flat_map(|k| State::ALL.iter().map(move |s| (k.to_string(), *s, 0)))
        .collect();
    for (kind, state, n) in &g.attempts {
        match rows.iter_mut().find(|(k, s, _)| k == kind && s == state) {
            Some(row) => row.2 = *n,
            None => rows.push((kind.clone(), *state, *n)),
        }
    }
    for (kind, state, n) in rows {
        let _ = writeln!(
            out,
            "cobro_attempts{{kind=\"{}\",state=\"{}\"}} {n}",
            escape(&kind),
            state.as_str()
        );
    }
    gauge(
        out,
        "cobro_orders_double_approved",
        "Orders with two or more APROBADO charges. Must be 0.",
        g.double_approved_orders as f64,
    );
    gauge(
        out,
        "cobro_recon_cases_open",
        "Reconciliation cases not yet resolved.",
        g.open_recon_cases as f64,
    );
    gauge(
        out,
        "cobro_desconocido_oldest_age_seconds",
        "Seconds the oldest DESCONOCIDO attempt has been so; 0 when none.",
        g.oldest_desconocido_secs,
    );
    let review = g
        .attempts
        .iter()
        .filter(|(_, s, _)| *s == State::EnRevision)
        .map(|(_, _, n)| n)
        .sum::<i64>();
    gauge(
        out,
        "cobro_escalations_open",
        "Finance's queue: attempts in EN_REVISION plus open reconciliation cases.",
        (review + g.open_recon_cases) as f64,
    );
    header(
        out,
        "cobro_gateway_breaker_open",
        "1 while the gateway's circuit breaker is open (calls stopped, attempts parked).",
    );
    for b in &g.health.breakers {
        let _ = writeln!(
            out,
            "cobro_gateway_breaker_open{{gateway=\"{}\"}} {}",
            escape(&b.gateway),
            u8::from(b.is_open())
        );
    }
    header(
        out,
        "cobro_gateway_breaker_opened_timestamp_seconds",
        "When the open breaker opened (Unix seconds); 0 while closed.",
    );
    for b in &g.health.breakers {
        let at = b.opened_at.filter(|_| b.is_open());
        let _ = writeln!(
            out,
            "cobro_gateway_breaker_opened_timestamp_seconds{{gateway=\"{}\"}} {}",
            escape(&b.gateway),
            at.map_or(0, |t| t.timestamp())
        );
    }
    gauge(
        out,
        "cobro_attempts_parked",
        "Attempts parked until the gateway answers again (or sending resumes).",
        g.health.parked as f64,
    );
    gauge(
        out,
        "cobro_due_lag_seconds",
        "How far past its due time the most overdue attempt nobody holds is; 0 when none.",
        g.on_call.due_lag_secs,
    );
    gauge(
        out,
        "cobro_reconciliation_last_success_timestamp_seconds",
        "When the latest successful reconciliation run finished (Unix seconds); 0 when none has.",
        g.on_call.last_reconciliation_ok.unwrap_or(0.0),
    );
    header(
        out,
        "cobro_cases_open",
        "Open reconciliation and dispute cases, per kind.",
    );
    for kind in CASE_KINDS {
        let n = g
            .on_call
            .open_cases_by_kind
            .iter()
            .find(|(k, _)| k == kind)
            .map_or(0, |(_, n)| *n);
        let _ = writeln!(out, "cobro_cases_open{{kind=\"{kind}\"}} {n}");
    }
    gauge(
        out,
        "cobro_notices_pending",
        "Customer notices the app has not acknowledged yet.",
        g.on_call.notices_pending as f64,
    );
    gauge(
        out,
        "cobro_gateway_double_charges",
        "Orders the gateway charged twice, not yet refunded: the higher of the latest successful daily close and intraday run. Any non-zero value opens a review.",
        g.on_call.gateway_double_charges as f64,
    );
    gauge(
        out,
        "cobro_notices_failed",
        "Customer notices whose every delivery try to COBRO_NOTICE_URL failed, not acknowledged.",
        g.on_call.notices_failed as f64,
    );
    gauge(
        out,
        "cobro_sending_paused",
        "1 while the incident switch pauses sending new charges (lookups continue).",
        f64::from(u8::from(g.sending_paused)),
    );
    recovery::render(out, &g.business_retries);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape("x\ny"), "x\\ny");
    }

    #[test]
    fn every_kind_and_state_is_shown_and_finance_queue_adds_cases() {
        let mut out = String::new();
        let g = Gauges {
            attempts: vec![
                ("initial".into(), State::Aprobado, 3),
                ("initial".into(), State::EnRevision, 2),
                ("refund".into(), State::EnRevision, 1),
            ],
            double_approved_orders: 0,
            open_recon_cases: 4,
            oldest_desconocido_secs: 1.5,
            health: crate::store::GatewayHealth::default(),
            sending_paused: true,
            on_call: crate::store::OnCall {
                due_lag_secs: 2.5,
                last_reconciliation_ok: Some(1_764_547_200.0),
                open_cases_by_kind: vec![("dispute".into(), 2)],
                notices_pending: 3,
                gateway_double_charges: 1,
                notices_failed: 1,
            },
            business_retries: vec![
                crate::store::RetryTally {
                    decline_code: Some("insufficient_funds".into()),
                    outcome: crate::store::RetryOutcome::Recovered,
                    count: 2,
                },
                crate::store::RetryTally {
                    decline_code: Some("insufficient_funds".into()),
                    outcome: crate::store::RetryOutcome::Declined,
                    count: 2,
                },
            ],
        };
        render_gauges(&mut out, &g);
        for line in [
            "cobro_sending_paused 1",
            "cobro_due_lag_seconds 2.5",
            "cobro_reconciliation_last_success_timestamp_seconds 1764547200",
            "cobro_cases_open{kind=\"dispute\"} 2",
            "cobro_cases_open{kind=\"double_charge\"} 0",
            "cobro_notices_pending 3",
            "cobro_gateway_double_charges 1",
            "cobro_notices_failed 1",
            "cobro_business_retries{class=\"insufficient_funds\",outcome=\"recovered\"} 2",
            "cobro_business_retries{class=\"card_expired\",outcome=\"declined\"} 0",
            "cobro_business_retry_recovery_ratio{class=\"insufficient_funds\"} 0.5",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} in\n{out}");
        }
        let lines: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.starts_with("cobro_attempts{"))
                .count(),
            KINDS.len() * State::ALL.len()
        );
        assert!(lines.contains(&"cobro_attempts{kind=\"initial\",state=\"APROBADO\"} 3"));
        assert!(lines.contains(&"cobro_attempts{kind=\"business_retry\",state=\"APROBADO\"} 0"));
        assert!(lines.contains(&"cobro_orders_double_approved 0"));
        assert!(lines.contains(&"cobro_desconocido_oldest_age_seconds 1.5"));
        assert!(lines.contains(&"cobro_escalations_open 7"));
        assert!(out.contains("# TYPE cobro_attempts gauge"));
    }
}
