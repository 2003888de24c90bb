//! The Stripe worker's start-up call: one authenticated read
//! (`GET /v1/payment_intents?limit=1`, which Stripe and localstripe both
//! serve and which changes nothing), so that a revoked or mistyped key
//! stops the process at once instead of opening the breaker on the first
//! charges.
//!
//! Invariant: only a 401 or 403 refuses the start; a gateway that does not
//! answer lets the worker start (its attempts wait, parked, as on any
//! outage), and the secret itself is never shown.

use super::super::http::Transport;
use super::StripeGateway;

/// What the start-up call found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyCheck {
    /// Any answer but 401/403: the key was not refused.
    Accepted,
    /// 401 or 403: the key is wrong, revoked or lacks permissions.
    Refused(u16),
    /// No answer (refused connection, timeout, TLS): the gateway's outage,
    /// not the key's fault.
    Unreachable(&'static str),
}

impl KeyCheck {
    /// The refusal as a start-up error naming the variable; `None` otherwise.
    pub fn refusal(&self) -> Option<String> {
        match self {
            KeyCheck::Refused(code) => Some(format!(
                "the Stripe API refused STRIPE_SECRET_KEY ({code} to an authenticated GET /v1/payment_intents): the key is wrong, revoked, for another account or, if restricted, lacks PaymentIntents read access; set the secret key from Stripe's dashboard, Developers → API keys"
            )),
            KeyCheck::Accepted | KeyCheck::Unreachable(_) => None,
        }
    }
}

impl StripeGateway {
    /// One authenticated read that moves no money.
    pub async fn check_key(&self) -> KeyCheck {
        let query = [("limit".to_owned(), "1".to_owned())];
        match self.get("/v1/payment_intents", &query).await {
            Ok(answer) if answer.code == 401 || answer.code == 403 => {
                KeyCheck::Refused(answer.code)
            }
            Ok(_) => KeyCheck::Accepted,
            // An answer arrived, too large to read: only its status counts.
            Err(Transport::TooLarge {
                status: code @ (401 | 403),
                ..
            }) => KeyCheck::Refused(code),
            Err(Transport::TooLarge { .. }) => KeyCheck::Accepted,
            Err(Transport::NotSent(why) | Transport::Unknown(why)) => KeyCheck::Unreachable(why),
        }
    }
}
