//! Gateway webhooks in the store, shared by both backends: what an accepted
//! event does to its attempt.
//!
//! Invariant: an event id is stored once (UNIQUE), in the same transaction
//! as the transition it causes, with the attempt row locked; an outcome the
//! state machine refuses (news about an attempt that already moved on) is a
//! recorded no-op, never an error.
//!
//! Steps whose Rust is the same on both backends are written once at the
//! end, generic over the backend; `pg/webhooks.rs` and `lite/webhooks.rs`
//! hold their SQL, and the steps that differ (row locks, type mapping).

use serde::Serialize;
use sqlx::{Encode, FromRow, Pool, Type};
use uuid::Uuid;

use super::Attempt;
use super::change::{Applied, Change, Plan, plan};
use super::contradiction::Contradiction;
use super::tx::Tx;
use super::values::Sql;
use super::{Store, StoreError, card_updated};
use crate::gateway::Evidence;
use crate::retry::RetryPolicy;
use crate::state::{Event, InvalidTransition, State};

/// What a verified, parsed gateway event says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventOutcome {
    Approved {
        charge_id: String,
    },
    Declined {
        code: String,
        charge_id: Option<String>,
    },
    /// The card network updated this payment method (account updater): a
    /// scheduled business retry of it is pulled forward
    /// ([`super::card_updated`]).
    CardUpdated {
        payment_method: String,
    },
    /// A type cobro does not act on: stored and acknowledged.
    NotActionable,
}

/// A verified event, ready for the store.
#[derive(Debug, Clone)]
pub struct IncomingEvent {
    pub event_id: String,
    pub event_type: String,
    /// Our idempotency key, which the gateway echoes on the charge.
    pub key: Option<Uuid>,
    pub outcome: EventOutcome,
    /// What the event says of its object, checked against the attempt
    /// its key names before anything moves.
    pub said: Said,
    /// The raw JSON body.
    pub payload: String,
}

/// What an event says of the object it is about, where it says it: whether
/// it is a refund, its amount and currency. A gateway's event names our
/// attempt by key alone; one whose object is of another kind, amount or
/// currency moves nothing and opens a case (`amount_mismatch`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Said {
    pub refund: Option<bool>,
    pub amount_minor: Option<i64>,
    /// ISO 4217, any case.
    pub currency: Option<String>,
}

impl Said {
    /// How the event's object differs from `a`, in words; `None` when
    /// nothing it says contradicts it.
    pub fn differs(&self, a: &Attempt) -> Option<String> {
        let mut off = Vec::new();
        if let Some(refund) = self.refund.filter(|r| *r != a.is_refund()) {
            let kind = |r: bool| if r { "a refund" } else { "a charge" };
            off.push(format!(
                "it is about {}, the attempt is {}",
                kind(refund),
                kind(a.is_refund())
            ));
        }
        if let Some(amount) = self.amount_minor.filter(|m| *m != a.amount_minor) {
            off.push(format!(
                "amount {amount} minor units, the attempt's {}",
                a.amount_minor
            ));
        }
        if let Some(currency) = self
            .currency
            .as_deref()
            .filter(|c| !c.eq_ignore_ascii_case(&a.currency))
        {
            off.push(format!("currency {currency}, the attempt's {}", a.currency));
        }
        (!off.is_empty()).then(|| off.join("; "))
    }
}

impl IncomingEvent {
    /// The gateway's object the event is about (a charge or PaymentIntent
    /// id), when it moves an attempt.
    pub fn gateway_object(&self) -> Option<&str> {
        match &self.outcome {
            EventOutcome::Approved { charge_id } => Some(charge_id),
            EventOutcome::Declined { charge_id, .. } => charge_id.as_deref(),
            EventOutcome::CardUpdated { .. } | EventOutcome::NotActionable => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum WebhookResult {
    /// The event id was seen before: nothing done.
    Duplicate,
    Applied {
        attempt_id: Uuid,
        to: State,
    },
    /// A card updated by its network: these scheduled retries of it were
    /// pulled forward.
    Rescheduled {
        attempt_ids: Vec<Uuid>,
    },
    /// Not valid from the attempt's state: recorded, nothing changed.
    Noop {
        attempt_id: Uuid,
        state: State,
    },
    /// No attempt carries that key.
    Unmatched,
    Ignored,
}

impl WebhookResult {
    pub(crate) fn outcome_column(&self) -> &'static str {
        match self {
            WebhookResult::Applied { .. } | WebhookResult::Rescheduled { .. } => "applied",
            WebhookResult::Noop { .. } => "noop",
            WebhookResult::Unmatched => "unmatched",
            WebhookResult::Duplicate | WebhookResult::Ignored => "ignored",
        }
    }
}

/// A rejected delivery, as stored (the sample of its reason and minute).
pub(crate) struct Rejected<'a> {
    pub(crate) reason: &'a str,
    pub(crate) detail: Option<&'a str>,
    pub(crate) headers: &'a serde_json::Value,
    pub(crate) body_size: usize,
    /// Unix minutes; UNIQUE with the reason.
    pub(crate) minute: i64,
}

/// The evidence a webhook leaves in the transition log.
fn evidence(ev: &IncomingEvent) -> Evidence {
    Evidence {
        call: "webhook".into(),
        http_status: None,
        error_kind: "webhook".into(),
        lookup_result: Some(
            match ev.outcome {
                EventOutcome::Approved { .. } => "approved",
                EventOutcome::Declined { .. } => "declined",
                EventOutcome::CardUpdated { .. } => "card_updated",
                EventOutcome::NotActionable => "none",
            }
            .into(),
        ),
        elapsed_ms: 0,
        detail: Some(format!("{} {}", ev.event_type, ev.event_id)),
        card_brand: None,
    }
}

/// The write an actionable event asks for, or why the state machine refuses it.
fn change_for<'a>(
    seen: &Attempt,
    ev: &'a IncomingEvent,
    actor: &'a str,
    evidence: &'a Evidence,
    retry: Option<&RetryPolicy>,
) -> Result<Option<(Change<'a>, Plan<'a>)>, InvalidTransition> {
    let mut change = match &ev.outcome {
        EventOutcome::Approved { charge_id } => {
            let mut c = Change::new(Some(Event::Approved), "webhook_approved", actor);
            c.charge_id = Some(charge_id);
            c
        }
        EventOutcome::Declined { code, charge_id } => {
            let mut c = Change::new(Some(Event::Declined), "webhook_declined", actor);
            c.decline_code = Some(code);
            c.charge_id = charge_id.as_deref();
            // A declined refund is final (the app decides), as the
            // engine's own decline of one is.
            c.act_in = retry
                .filter(|_| !seen.is_refund())
                .and_then(|p| p.retry_in(code, seen.attempt_number));
            c
        }
        // Handled by the backends before an attempt is looked up by key.
        EventOutcome::CardUpdated { .. } | EventOutcome::NotActionable => return Ok(None),
    };
    change.evidence = Some(evidence);
    let p = plan(seen, &change)?;
    Ok(Some((change, p)))
}

/// What to do with a stored, new event, given its attempt (if any).
enum Decision<'a> {
    Done(WebhookResult, Option<String>),
    Apply(&'a Attempt, Box<(Change<'a>, Plan<'a>)>),
    /// The event's object is not the attempt its key names (another kind,
    /// amount or currency): nothing moves, a case opens.
    Mismatch(&'a Attempt, String),
}

fn decide<'a>(
    seen: Option<&'a Attempt>,
    ev: &'a IncomingEvent,
    actor: &'a str,
    evidence: &'a Evidence,
    retry: Option<&RetryPolicy>,
) -> Decision<'a> {
    let Some(seen) = seen else {
        let result = match ev.outcome {
            EventOutcome::NotActionable => WebhookResult::Ignored,
            _ => WebhookResult::Unmatched,
        };
        return Decision::Done(result, None);
    };
    let moves = matches!(
        ev.outcome,
        EventOutcome::Approved { .. } | EventOutcome::Declined { .. }
    );
    if let Some(off) = ev.said.differs(seen).filter(|_| moves) {
        return Decision::Mismatch(seen, off);
    }
    match change_for(seen, ev, actor, evidence, retry) {
        Ok(None) => Decision::Done(WebhookResult::Ignored, None),
        Ok(Some(write)) => Decision::Apply(seen, Box::new(write)),
        Err(refused) => Decision::Done(
            WebhookResult::Noop {
                attempt_id: seen.id,
                state: seen.state,
            },
            Some(refused.to_string()),
        ),
    }
}

/// The case an event opens when it contradicts an attempt we hold as
/// settled (approved after `RECHAZADO`, declined after `APROBADO`).
fn contradiction(seen: &Attempt, ev: &IncomingEvent) -> Option<Contradiction> {
    let source = format!("webhook {} ({})", ev.event_id, ev.event_type);
    let now = chrono::Utc::now();
    match &ev.outcome {
        EventOutcome::Approved { charge_id } => {
            Contradiction::approved(seen, charge_id, &source, now)
        }
        EventOutcome::Declined { code, .. } => Contradiction::declined(seen, code, &source, now),
        EventOutcome::CardUpdated { .. } | EventOutcome::NotActionable => None,
    }
}

/// The result of applying an event's change (the row is locked, so losing
/// the compare-and-set should not happen; if it does, it is a no-op).
fn after_apply(seen: &Attempt, applied: Applied) -> (WebhookResult, Option<String>) {
    match applied {
        Applied::Moved(now) => (
            WebhookResult::Applied {
                attempt_id: now.id,
                to: now.state,
            },
            None,
        ),
        Applied::Lost => (
            WebhookResult::Noop {
                attempt_id: seen.id,
                state: seen.state,
            },
            Some("the attempt moved meanwhile".into()),
        ),
    }
}

/// A webhook's flow inside its transaction: store the event once, find its
/// attempt (locked), decide, apply, and record the outcome on the event.
async fn record_in(
    tx: &mut Tx,
    ev: &IncomingEvent,
    retry: Option<&RetryPolicy>,
) -> Result<WebhookResult, StoreError> {
    if !tx.insert_event(ev).await? {
        return Ok(WebhookResult::Duplicate);
    }
    let actor = format!("webhook:{}", ev.event_id);
    if let EventOutcome::CardUpdated { payment_method } = &ev.outcome {
        let moved = match retry {
            Some(policy) => {
                card_updated::pull_forward(tx, ev, payment_method, policy, &actor).await?
            }
            None => Vec::new(),
        };
        let (result, detail) = card_updated::result(moved);
        tx.set_event_outcome(&ev.event_id, result.outcome_column(), detail, None)
            .await?;
        return Ok(result);
    }
    let seen = match ev.key {
        Some(key) => tx.attempt_by_key(key).await?,
        None => None,
    };
    let ev_evidence = evidence(ev);
    let (result, detail) = match decide(seen.as_ref(), ev, &actor, &ev_evidence, retry) {
        // News the state machine refuses may contradict what we hold as
        // settled: that opens a case (and cancels a scheduled retry) here,
        // in the webhook's transaction, instead of vanishing.
        Decision::Done(result @ WebhookResult::Noop { .. }, detail) => {
            match seen.as_ref().and_then(|a| Some((a, contradiction(a, ev)?))) {
                Some((a, c)) => {
                    super::contradiction::contradicted_in(tx, a, &c, &actor).await?;
                    let said = detail.unwrap_or_default();
                    (result, Some(format!("{said}; contradicts it: case opened")))
                }
                None => (result, detail),
            }
        }
        Decision::Done(result, detail) => (result, detail),
        Decision::Mismatch(a, off) => {
            let c = super::contradiction::Contradiction::mismatched(
                a,
                ev.gateway_object(),
                &off,
                &format!("webhook {} ({})", ev.event_id, ev.event_type),
                chrono::Utc::now(),
            );
            super::contradiction::contradicted_in(tx, a, &c, &actor).await?;
            let result = WebhookResult::Noop {
                attempt_id: a.id,
                state: a.state,
            };
            (result, Some(format!("not applied: {off}; case opened")))
        }
        Decision::Apply(seen, write) => {
            let (change, plan) = *write;
            after_apply(seen, tx.apply(seen, &change, &plan).await?)
        }
    };
    let attempt = seen.as_ref().map(|a| a.id);
    tx.set_event_outcome(&ev.event_id, result.outcome_column(), detail, attempt)
        .await?;
    Ok(result)
}

impl super::Store {
    /// The attempt whose recorded gateway object (Stripe's PaymentIntent)
    /// is `gateway_ref`: how an event without cobro's key in its metadata
    /// still finds its attempt.
    pub async fn attempt_by_gateway_ref(
        &self,
        gateway_ref: &str,
    ) -> Result<Option<Attempt>, super::StoreError> {
        on_db!(self, webhooks::by_gateway_ref(gateway_ref))
    }
}

impl Store {
    /// Stores a verified gateway event once and applies what it says to its
    /// attempt, in one transaction (see `store::webhooks`).
    /// A decline schedules the order's business retry per `retry`.
    pub async fn record_webhook(
        &self,
        ev: &IncomingEvent,
        retry: Option<&crate::retry::RetryPolicy>,
    ) -> Result<WebhookResult, StoreError> {
        let mut tx = self.begin_write().await?;
        let result = record_in(&mut tx, ev, retry).await?;
        tx.commit().await?;
        Ok(result)
    }

    /// Records a rejected delivery (reason, safe headers, size) as the
    /// sample of its reason for `minute` (Unix minutes): a second one for
    /// the same reason and minute, from any process, is not stored.
    pub async fn record_rejected_webhook(
        &self,
        reason: &str,
        detail: Option<&str>,
        headers: &serde_json::Value,
        body_size: usize,
        minute: i64,
    ) -> Result<(), StoreError> {
        // A detail may quote the sender's bytes; PostgreSQL text holds no NUL.
        let detail = detail.map(|d| d.replace('\0', "\\u0000"));
        let row = Rejected {
            reason,
            detail: detail.as_deref(),
            headers,
            body_size,
            minute,
        };
        on_db!(self, webhooks::record_rejected(&row))
    }

    /// (accepted events, rejected deliveries) stored so far.
    pub async fn webhook_counts(&self) -> Result<(i64, i64), StoreError> {
        on_db_sql!(self, webhooks::counts[COUNTS]())
    }

    /// The reasons of every rejected delivery, oldest first.
    pub async fn rejected_webhook_reasons(&self) -> Result<Vec<String>, StoreError> {
        on_db_sql!(self, webhooks::rejected_reasons[REJECTED_REASONS]())
    }
}

/// Sets a stored event's outcome, detail and attempt: `sql` binds the
/// event id, outcome, detail and attempt id (`Id`: the backend's uuid).
pub(crate) async fn set_outcome<DB, Id>(
    tx: &mut DB::Connection,
    sql: &'static str,
    event_id: &str,
    outcome: &str,
    detail: Option<String>,
    attempt: Option<Id>,
) -> Result<(), StoreError>
where
    DB: Sql,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    Option<String>: for<'q> Encode<'q, DB> + Type<DB>,
    Option<Id>: for<'q> Encode<'q, DB> + Type<DB>,
{
    sqlx::query(sql)
        .bind(event_id)
        .bind(outcome)
        .bind(detail)
        .bind(attempt)
        .execute(DB::on(tx))
        .await?;
    Ok(())
}

/// Stored events and rejected-webhook rows: `sql` selects the two counts.
pub(crate) async fn counts<DB>(pool: &Pool<DB>, sql: &'static str) -> Result<(i64, i64), StoreError>
where
    DB: Sql,
    (i64, i64): for<'r> FromRow<'r, DB::Row>,
{
    let mut conn = pool.acquire().await?;
    Ok(sqlx::query_as(sql).fetch_one(DB::on(&mut conn)).await?)
}

/// The rejected webhooks' reasons, oldest first: `sql` selects them.
pub(crate) async fn rejected_reasons<DB>(
    pool: &Pool<DB>,
    sql: &'static str,
) -> Result<Vec<String>, StoreError>
where
    DB: Sql,
    (String,): for<'r> FromRow<'r, DB::Row>,
{
    let mut conn = pool.acquire().await?;
    Ok(sqlx::query_scalar(sql).fetch_all(DB::on(&mut conn)).await?)
}
