//! What a delivered notice says: the JSON body the app receives, built from
//! the outbox row by pure functions (no clock, no I/O).
//!
//! The decline categories are [`Category`]'s (in `domain`, with their table).
//!
//! `update_payment_method` is true when a new card would help: the
//! category says so, or the payment failed for good (out of attempts, the
//! card network's retry cap, or a final decline): nothing more will be
//! charged on the old token.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use crate::store::Outgoing;

pub use crate::domain::Category;

/// Why a payment failed for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The decline code is not retried.
    FinalDecline,
    /// The order had its maximum number of attempts.
    OutOfAttempts,
    /// The card network's cap on retries of one card.
    CardCap,
}

/// Why a `payment_failed` notice's payment ended: the refused retry's
/// reason when there was one, else whether its code is retried at all.
pub fn ending(refusal: Option<&str>, code_is_retryable: bool) -> Ending {
    match refusal {
        Some("card_cap") => Ending::CardCap,
        Some("max_attempts") => Ending::OutOfAttempts,
        _ if code_is_retryable => Ending::OutOfAttempts,
        _ => Ending::FinalDecline,
    }
}

/// The Standard Webhooks message id of a notice: stable across tries, so
/// the app deduplicates by it.
pub fn message_id(notice_id: i64) -> String {
    format!("notice_{notice_id}")
}

/// The event type of a notice kind.
pub fn event_type(kind: &str) -> String {
    match kind {
        "payment_failed" => "payment.failed".into(),
        other => format!("payment.{other}"),
    }
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The body POSTed for notice `n`. `code_is_retryable`: whether its decline
/// code gets business retries (`COBRO_RETRYABLE_DECLINES`).
pub fn body(out: &Outgoing, code_is_retryable: bool) -> Value {
    let n = &out.notice;
    let category = n.decline_code.as_deref().map(Category::of);
    let reason = category.map_or("the payment was declined", Category::words);
    let (what, update) = match n.kind.as_str() {
        "retry_scheduled" => (
            format!(
                "The payment was declined: {reason}. It will be tried again automatically{}.",
                n.next_retry_at
                    .map(|t| format!(" at {}", rfc3339(t)))
                    .unwrap_or_default()
            ),
            category.is_some_and(Category::new_card_helps),
        ),
        "payment_failed" => {
            let end = match ending(out.refusal.as_deref(), code_is_retryable) {
                Ending::FinalDecline => "This decline is final: the payment is not tried again",
                Ending::OutOfAttempts => "No attempts are left for this order",
                Ending::CardCap => {
                    "The card has had as many retries as the card network allows: no further retry"
                }
            };
            (format!("The payment failed: {reason}. {end}."), true)
        }
        _ => (
            format!(
                "The payment was approved on attempt {}, after an earlier decline.",
                out.attempt_number
            ),
            false,
        ),
    };
    json!({
        "type": event_type(&n.kind),
        "timestamp": rfc3339(n.created_at),
        "data": {
            "notice_id": n.id,
            "order_id": n.order_id,
            "attempt_id": n.attempt_id,
            "attempt_number": out.attempt_number,
            "amount_minor": out.amount_minor,
            "currency": out.currency,
            "what_happened": what,
            "decline_code": n.decline_code,
            "decline_category": category.map(Category::as_str),
            "decline_reason": category.map(Category::words),
            "next_retry_at": n.next_retry_at.map(rfc3339),
            "update_payment_method": update,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Notice;

    #[test]
    fn decline_codes_map_to_their_category_and_advice() {
        let table = [
            ("insufficient_funds", Category::InsufficientFunds, false),
            ("expired_card", Category::CardExpired, true),
            ("stolen_card", Category::CardLostStolenOrFraud, true),
            ("lost_card", Category::CardLostStolenOrFraud, true),
            ("fraudulent", Category::CardLostStolenOrFraud, true),
            (
                "card_declined/do_not_try_again",
                Category::DoNotTryAgain,
                true,
            ),
            (
                "insufficient_funds/do_not_try_again",
                Category::DoNotTryAgain,
                true,
            ),
            ("invalid_account", Category::CardInvalid, true),
            (
                "authentication_required",
                Category::AuthenticationRequired,
                false,
            ),
            ("try_again_later", Category::IssuerUnavailable, false),
            ("issuer_unavailable", Category::IssuerUnavailable, false),
            ("do_not_honor", Category::GenericDeclined, false),
            ("card_declined", Category::GenericDeclined, false),
            ("something_new", Category::GenericDeclined, false),
        ];
        for (code, category, helps) in table {
            assert_eq!(Category::of(code), category, "{code}");
            assert_eq!(category.new_card_helps(), helps, "{code}");
            assert!(Category::ALL.contains(&category), "{code}");
            assert!(!category.words().is_empty());
        }
    }

    #[test]
    fn a_failed_payment_says_why_it_ended() {
        assert_eq!(ending(Some("card_cap"), true), Ending::CardCap);
        assert_eq!(ending(Some("max_attempts"), true), Ending::OutOfAttempts);
        assert_eq!(ending(None, true), Ending::OutOfAttempts);
        assert_eq!(ending(None, false), Ending::FinalDecline);
        assert_eq!(ending(Some("not_retried"), false), Ending::FinalDecline);
    }

    fn notice(kind: &str, code: Option<&str>) -> Outgoing {
        let at = DateTime::parse_from_rfc3339("2026-12-05T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        Outgoing {
            notice: Notice {
                id: 17,
                order_id: "order-42".into(),
                attempt_id: uuid::Uuid::nil(),
                kind: kind.into(),
                decline_code: code.map(str::to_owned),
                next_retry_at: (kind == "retry_scheduled").then(|| at + chrono::Duration::days(1)),
                created_at: at,
                acked_at: None,
                acked_by: None,
                delivery_attempts: 0,
                next_delivery_at: None,
                last_status: None,
                last_error: None,
                delivered_at: None,
                failed_at: None,
            },
            amount_minor: 1999,
            currency: "USD".into(),
            attempt_number: 2,
            refusal: None,
            claim: uuid::Uuid::nil(),
        }
    }

    #[test]
    fn the_payload_carries_what_the_app_writes_to_its_customer() {
        let b = body(&notice("retry_scheduled", Some("insufficient_funds")), true);
        assert_eq!(b["type"], "payment.retry_scheduled");
        assert_eq!(b["timestamp"], "2026-12-05T10:00:00.000Z");
        let d = &b["data"];
        assert_eq!(
            (d["order_id"].as_str(), d["amount_minor"].as_i64()),
            (Some("order-42"), Some(1999))
        );
        assert_eq!(d["currency"], "USD");
        assert_eq!(d["decline_category"], "insufficient_funds");
        assert_eq!(d["next_retry_at"], "2026-12-06T10:00:00.000Z");
        assert_eq!(d["update_payment_method"], false);
        assert!(
            d["what_happened"]
                .as_str()
                .unwrap()
                .contains("tried again automatically at 2026-12-06")
        );

        let b = body(&notice("payment_failed", Some("expired_card")), false);
        assert_eq!(b["type"], "payment.failed");
        assert_eq!(b["data"]["decline_category"], "card_expired");
        assert_eq!(b["data"]["update_payment_method"], true);
        assert_eq!(b["data"]["next_retry_at"], Value::Null);
        assert!(
            b["data"]["what_happened"]
                .as_str()
                .unwrap()
                .contains("final")
        );

        let mut capped = notice("payment_failed", Some("insufficient_funds"));
        capped.refusal = Some("card_cap".into());
        let b = body(&capped, true);
        assert_eq!(b["data"]["update_payment_method"], true);
        assert!(
            b["data"]["what_happened"]
                .as_str()
                .unwrap()
                .contains("card network")
        );

        let b = body(&notice("approved_after_retry", None), true);
        assert_eq!(b["type"], "payment.approved_after_retry");
        assert_eq!(b["data"]["update_payment_method"], false);
        assert_eq!(b["data"]["decline_category"], Value::Null);
        assert_eq!(message_id(17), "notice_17");
    }
}
