//! The gateway's health on finance's page: the incident switch when
//! sending is paused ("sending paused since … by …"); while the breaker is
//! open, "gateway unreachable since …, N attempts waiting"; while parked
//! attempts are still being re-woken, how many are left.

use std::fmt::Write as _;

use super::page::esc;
use crate::store::{GatewayHealth, Store};

/// The incident switch, when sending is paused; empty otherwise. On every
/// finance page that shows data (the queue, an attempt, the summary) and
/// on the operator's pages.
pub(crate) async fn pause_banner(store: &Store) -> String {
    match store.pause_state().await {
        Ok(Some(p)) if p.paused => format!(
            "<p class=\"note err\" id=\"paused\">Sending paused since {} by {}{}: no new charge \
             is sent and no business retry is made; lookups go on. Attempts due meanwhile wait \
             and resume, a few per second, when sending is resumed (<code>cobro resume</code>).</p>",
            p.changed_at.format("%H:%M UTC on %Y-%m-%d"),
            esc(&p.changed_by),
            p.reason
                .map(|r| format!(" ({})", esc(&r)))
                .unwrap_or_default(),
        ),
        Ok(_) => String::new(),
        Err(e) => format!(
            "<p class=\"note err\" id=\"paused\">Could not read the incident switch: {}</p>",
            esc(&e.to_string())
        ),
    }
}

/// The banner for the top of the queue: the switch, then the gateway's
/// health; empty when all is well. A database error shows as such: the
/// page still renders.
pub(crate) async fn banner(store: &Store) -> String {
    let mut out = pause_banner(store).await;
    match store.gateway_health().await {
        Ok(health) => out.push_str(&render(&health)),
        Err(e) => {
            let _ = write!(
                out,
                "<p class=\"note err\" id=\"gateway\">Could not read the gateway's health: {}</p>",
                esc(&e.to_string())
            );
        }
    }
    out
}

fn render(h: &GatewayHealth) -> String {
    let mut out = String::new();
    if let Some((gateway, since)) = h.open_since() {
        let _ = write!(
            out,
            "<p class=\"note err\" id=\"gateway\">Gateway <code>{}</code> unreachable since {}; \
             {} attempt(s) waiting. Nothing is sent to it until it answers a probe; then the \
             waiting attempts resume, a few per second.</p>",
            esc(gateway),
            since.format("%H:%M UTC on %Y-%m-%d"),
            h.parked
        );
    } else if h.parked > 0 {
        let _ = write!(
            out,
            "<p class=\"note\" id=\"gateway\">The gateway answers again; {} parked attempt(s) \
             are resuming, a few per second.</p>",
            h.parked
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::store::BreakerRow;

    #[test]
    fn an_open_breaker_says_since_when_and_how_many_wait() {
        let mut b = BreakerRow::new("http://gw.example:8089");
        assert_eq!(render(&GatewayHealth::default()), "");
        b.state = "open".into();
        b.opened_at = chrono::Utc
            .with_ymd_and_hms(2026, 11, 30, 12, 3, 0)
            .single();
        let h = GatewayHealth {
            breakers: vec![b],
            parked: 340,
            oldest_parked: None,
        };
        let text = render(&h);
        assert!(
            text.contains("unreachable since 12:03 UTC on 2026-11-30; 340 attempt(s) waiting"),
            "{text}"
        );
        let closed = GatewayHealth {
            breakers: vec![BreakerRow::new("g")],
            parked: 5,
            oldest_parked: None,
        };
        assert!(render(&closed).contains("5 parked attempt(s) are resuming"));
    }
}
