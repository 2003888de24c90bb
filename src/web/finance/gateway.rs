//! The gateway's health on finance's page: the incident switch when
//! sending is paused ("sending paused since … by …"); while the breaker is
//! open, "gateway unreachable since …, N attempts waiting"; while parked
//! attempts are still being re-woken, how many are left.

use maud::{Markup, html};

use crate::store::{GatewayHealth, Store};

/// The incident switch, when sending is paused; empty otherwise. On every
/// finance page that shows data (the queue, an attempt, the summary) and
/// on the operator's pages.
pub(crate) async fn pause_banner(store: &Store) -> Markup {
    match store.pause_state().await {
        Ok(Some(p)) if p.paused => html! {
            p.note.err #paused {
                "Sending paused since " (p.changed_at.format("%H:%M UTC on %Y-%m-%d"))
                " by " (p.changed_by)
                @if let Some(r) = &p.reason { " (" (r) ")" }
                ": no new charge is sent and no business retry is made; lookups go on. \
                 Attempts due meanwhile wait and resume, a few per second, when sending \
                 is resumed (" code { "cobro resume" } ")."
            }
        },
        Ok(_) => html! {},
        Err(e) => html! {
            p.note.err #paused { "Could not read the incident switch: " (e) }
        },
    }
}

/// The banner for the top of the queue: the switch, then the gateway's
/// health; empty when all is well. A database error shows as such: the
/// page still renders.
pub(crate) async fn banner(store: &Store) -> Markup {
    let pause = pause_banner(store).await;
    let health = match store.gateway_health().await {
        Ok(health) => render(&health),
        Err(e) => html! {
            p.note.err #gateway { "Could not read the gateway's health: " (e) }
        },
    };
    html! { (pause) (health) }
}

fn render(h: &GatewayHealth) -> Markup {
    html! {
        @if let Some((gateway, since)) = h.open_since() {
            p.note.err #gateway {
                "Gateway " code { (gateway) } " unreachable since "
                (since.format("%H:%M UTC on %Y-%m-%d")) "; " (h.parked)
                " attempt(s) waiting. Nothing is sent to it until it answers a probe; then the \
                 waiting attempts resume, a few per second."
            }
        } @else if h.parked > 0 {
            p.note #gateway {
                "The gateway answers again; " (h.parked)
                " parked attempt(s) are resuming, a few per second."
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::store::BreakerRow;

    #[test]
    fn an_open_breaker_says_since_when_and_how_many_wait() {
        let mut b = BreakerRow::new("http://gw.example:8089");
        assert_eq!(render(&GatewayHealth::default()).into_string(), "");
        b.state = "open".into();
        b.opened_at = chrono::Utc
            .with_ymd_and_hms(2026, 11, 30, 12, 3, 0)
            .single();
        let h = GatewayHealth {
            breakers: vec![b],
            parked: 340,
            oldest_parked: None,
        };
        let text = render(&h).into_string();
        assert!(
            text.contains("unreachable since 12:03 UTC on 2026-11-30; 340 attempt(s) waiting"),
            "{text}"
        );
        let closed = GatewayHealth {
            breakers: vec![BreakerRow::new("g")],
            parked: 5,
            oldest_parked: None,
        };
        assert!(
            render(&closed)
                .into_string()
                .contains("5 parked attempt(s) are resuming")
        );
    }
}
