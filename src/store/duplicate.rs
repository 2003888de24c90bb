//! Refunding a duplicate that exists only at the gateway, from a
//! `double_charge` case: finance names the duplicate's gateway id, and cobro
//! writes a refund attempt like any other (its own key, the state machine,
//! lookups by key when the answer is lost), anchored on the order's APROBADO
//! charge and sent against the duplicate's id.
//!
//! Invariant: one transaction that holds the case (PostgreSQL `FOR UPDATE`,
//! SQLite `BEGIN IMMEDIATE`); the duplicate must be one of the case's
//! approved gateway charges and not the anchor's own; one refund that has
//! not failed per duplicate (the unique index `one_refund_per_duplicate`),
//! so asking again returns the same refund and never sends a second. Who
//! approved it is the transition log's actor.

use serde_json::{Value, json};
use uuid::Uuid;

use super::refund::{RefundError, Refunded};
use super::{Attempt, Store};
use crate::domain::{Amount, InputError};
use crate::state::State;

/// The cause of the refund's first transition-log row.
pub const CAUSE: &str = "duplicate_refund_requested";

/// What a `double_charge` case says about one of its charges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Duplicate {
    pub order_id: String,
    pub amount_minor: i64,
    pub currency: String,
}

/// The case as the request needs it.
pub(crate) struct CaseView {
    pub kind: String,
    pub order_id: Option<String>,
    pub resolved: bool,
    pub details: Value,
}

/// Checks the request against the case: an open `double_charge` case that
/// lists `charge_id` among its approved gateway charges.
pub(crate) fn duplicate_in_case(
    case_id: i64,
    case: &CaseView,
    charge_id: &str,
) -> Result<Duplicate, RefundError> {
    if case.kind != "double_charge" {
        return Err(RefundError::NotRefundable(format!(
            "case {case_id} is a {} case: only a double_charge case has a duplicate to refund",
            case.kind
        )));
    }
    if case.resolved {
        return Err(RefundError::NotRefundable(format!(
            "case {case_id} is already resolved"
        )));
    }
    let listed = case.details["gateway"].as_array().into_iter().flatten();
    let Some(record) = listed
        .filter(|g| g["status"] == "approved")
        .find(|g| g["id"].as_str() == Some(charge_id))
    else {
        return Err(RefundError::Invalid(InputError::new(
            "charge_id",
            format!("{charge_id:?} is not an approved charge of case {case_id}"),
        )));
    };
    let order_id = record["order_id"].as_str().unwrap_or_default();
    if case.order_id.as_deref() != Some(order_id) {
        return Err(RefundError::NotRefundable(format!(
            "case {case_id} lists charge {charge_id} under another order"
        )));
    }
    let amount = record["amount_minor"].as_i64().unwrap_or(0);
    Ok(Duplicate {
        order_id: order_id.to_owned(),
        amount_minor: Amount::parse(amount)?.minor(),
        currency: record["currency"].as_str().unwrap_or_default().to_owned(),
    })
}

/// The anchor: the order's APROBADO charge, which is not the duplicate.
pub(crate) fn anchor<'a>(
    order_id: &str,
    charges: &'a [Attempt],
    charge_id: &str,
) -> Result<&'a Attempt, RefundError> {
    let Some(a) = charges
        .iter()
        .find(|a| !a.is_refund() && a.state == State::Aprobado)
    else {
        return Err(RefundError::NotRefundable(format!(
            "order {order_id} has no APROBADO charge in cobro: settle its attempt first \
             (the refund of a duplicate is recorded against the order's approved charge)"
        )));
    };
    if a.gateway_charge_id.as_deref() == Some(charge_id) {
        return Err(RefundError::NotRefundable(format!(
            "gateway charge {charge_id} is the order's own approved charge (attempt {}), \
             not a duplicate: refund it the usual way",
            a.id
        )));
    }
    Ok(a)
}

/// The first log row's evidence.
pub(crate) fn evidence(case_id: i64, charge_id: &str, anchor: &Attempt, by: &str) -> Value {
    json!({
        "case_id": case_id,
        "duplicate_charge": charge_id,
        "refund_of": anchor.id,
        "approved_by": by,
    })
}

impl Store {
    /// Refunds the gateway charge `charge_id` of the open `double_charge`
    /// case `case_id`, approved by `by` (a named person: the log's actor);
    /// see the module docs. Asking again for the same duplicate returns the
    /// refund already asked for (`created: false`).
    pub async fn refund_duplicate(
        &self,
        case_id: i64,
        charge_id: &str,
        by: &str,
    ) -> Result<Refunded, RefundError> {
        let charge_id = charge_id.trim();
        if charge_id.is_empty() || charge_id.chars().count() > 255 {
            return Err(InputError::new("charge_id", "must be 1-255 characters").into());
        }
        let by = by.trim();
        if by.is_empty() || by.chars().count() > 200 {
            return Err(InputError::new("approved_by", "must be 1-200 characters").into());
        }
        let mut tx = self.begin_write().await?;
        let Some(case) = tx.case_view(case_id).await? else {
            return Err(RefundError::NotFound(format!("no case with id {case_id}")));
        };
        let dup = duplicate_in_case(case_id, &case, charge_id)?;
        if let Some(r) = tx.refund_of_gateway(charge_id).await? {
            return Ok(already(&r));
        }
        let charges = tx.approved_charges(&dup.order_id).await?;
        let anchor = anchor(&dup.order_id, &charges, charge_id)?;
        let new = NewRefund {
            id: Uuid::new_v4(),
            key: Uuid::new_v4(),
            dup: &dup,
            anchor: anchor.id,
            charge_id,
            actor: format!("finance:{by}"),
            evidence: evidence(case_id, charge_id, anchor, by),
        };
        tx.insert_duplicate_refund(&new).await?;
        tx.commit().await?;
        Ok(Refunded {
            refund_id: new.id,
            idempotency_key: new.key,
            state: State::Pendiente,
            created: true,
        })
    }
}

/// The refund of a duplicate, as each backend inserts it (with its first
/// transition-log row and its wake-up).
pub(crate) struct NewRefund<'a> {
    pub id: Uuid,
    pub key: Uuid,
    pub dup: &'a Duplicate,
    /// The order's own APROBADO charge (`refund_of`).
    pub anchor: Uuid,
    /// The duplicate's gateway id (`refund_of_gateway`).
    pub charge_id: &'a str,
    pub actor: String,
    pub evidence: Value,
}

/// The refund already asked for this duplicate.
pub(crate) fn already(r: &Attempt) -> Refunded {
    Refunded {
        refund_id: r.id,
        idempotency_key: r.idempotency_key,
        state: r.state,
        created: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(kind: &str, resolved: bool) -> CaseView {
        CaseView {
            kind: kind.into(),
            order_id: Some("o-1".into()),
            resolved,
            details: json!({ "gateway": [
                { "id": "ch_1", "order_id": "o-1", "amount_minor": 1500, "currency": "EUR", "status": "approved" },
                { "id": "ch_2", "order_id": "o-1", "amount_minor": 1500, "currency": "EUR", "status": "approved" },
            ]}),
        }
    }

    #[test]
    fn only_an_approved_charge_of_an_open_double_charge_case_is_a_duplicate() {
        let dup = duplicate_in_case(7, &case("double_charge", false), "ch_2").unwrap();
        assert_eq!(
            dup,
            Duplicate {
                order_id: "o-1".into(),
                amount_minor: 1500,
                currency: "EUR".into()
            }
        );
        let err = duplicate_in_case(7, &case("double_charge", false), "ch_9").unwrap_err();
        assert!(
            matches!(&err, RefundError::Invalid(e) if e.field == "charge_id"),
            "{err}"
        );
        let err = duplicate_in_case(7, &case("unmatched_charge", false), "ch_2").unwrap_err();
        assert!(
            err.to_string().contains("only a double_charge case"),
            "{err}"
        );
        let err = duplicate_in_case(7, &case("double_charge", true), "ch_2").unwrap_err();
        assert!(err.to_string().contains("already resolved"), "{err}");
    }
}
