//! The review janitor's decisions, as pure functions: when an attempt in
//! `EN_REVISION` is looked up again, where in the gateway's listing its key
//! is searched once the gateway has forgotten the key, and what a listing
//! says about it.
//!
//! `EN_REVISION` is not the end of looking. An attempt handed to finance
//! (checks exhausted, key expired, or unsendable after a send) keeps being
//! looked up on a slow schedule (default 5 min, 15 min, 1 h, 4 h, 12 h, then
//! daily), each delay measured from when it entered review; within the key
//! lifetime by key, past it through the gateway's listing. A definite answer
//! settles it through the state machine; anything else leaves it in review
//! for the next check. The handler lives in `engine/review.rs`.
//!
//! Invariant: nothing here reads a clock, a database or a socket, and
//! nothing here ever leads to a send: the janitor never re-sends and never
//! makes a new key.

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::backoff::{ScheduleError, parse_duration};
use crate::gateway::{Evidence, GatewayRecord, ListError, Listed, LookupOutcome};
use crate::state::State;
use crate::store::Transition;

/// The decline code recorded for a decline the janitor found only in the
/// gateway's listing (a listing carries no code). Not a retryable code, so
/// no automatic business retry follows; finance may retry by hand.
pub const LISTED_DECLINE_CODE: &str = "declined_per_gateway_listing";

/// How far before the first send and after the last one (plus the longest
/// processing time) the listing is searched: clock skew between us and the
/// gateway, and queueing at the gateway.
pub const LISTING_MARGIN: Duration = Duration::from_secs(600);

/// The delays between lookups of an attempt in review, each measured from
/// the previous due time (the first from entering review); the last delay
/// repeats for as long as the attempt stays in review.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewSchedule {
    delays: Vec<Duration>,
}

impl Default for ReviewSchedule {
    fn default() -> Self {
        Self::parse(DEFAULT_REVIEW_SCHEDULE).expect("the default review schedule is valid")
    }
}

/// `COBRO_REVIEW_SCHEDULE`'s default.
pub const DEFAULT_REVIEW_SCHEDULE: &str = "5m,15m,1h,4h,12h,24h";

impl ReviewSchedule {
    /// Parses `"5m,15m,1h,4h,12h,24h"` (units `ms`, `s`, `m`, `h`, `d`).
    /// Every delay must be above zero: a zero delay repeated would look an
    /// attempt up in a loop.
    pub fn parse(list: &str) -> Result<Self, ScheduleError> {
        let delays = list
            .split(',')
            .map(|d| {
                parse_duration(d.trim())
                    .filter(|d| !d.is_zero())
                    .ok_or_else(|| ScheduleError::Delay(d.to_owned()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if delays.is_empty() {
            return Err(ScheduleError::Empty);
        }
        Ok(Self { delays })
    }

    /// The wait between entering review and the first check.
    pub fn first(&self) -> Duration {
        self.delays[0]
    }

    /// The first due time strictly after `now` of an attempt that entered
    /// review at `entered`: `entered + d1`, `+ d2`, …, then every last
    /// delay. A check that ran late (or early, on finance's "check again
    /// now") does not shift the schedule.
    pub fn next_after(&self, entered: DateTime<Utc>, now: DateTime<Utc>) -> DateTime<Utc> {
        let step = |d: Duration| chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX);
        let mut due = entered;
        for d in &self.delays {
            due += step(*d);
            if due > now {
                return due;
            }
        }
        let last = step(*self.delays.last().expect("never empty"));
        let behind = (now - due).num_milliseconds();
        let last_ms = last.num_milliseconds().max(1);
        due + last * i32::try_from(behind / last_ms + 1).unwrap_or(i32::MAX)
    }
}

/// When the attempt last entered `EN_REVISION` (from another state), from
/// its transition log (oldest first).
/// The cause of the log row that records finance's request to decline an
/// attempt whose payment object may still succeed (`finance::resolve`).
pub const DECLINE_REQUESTED: &str = "finance_decline_requested";

/// Whether finance asked, since the attempt last entered review, to decline
/// it: its next lookup then makes the gateway's answer final (cancels what
/// could still succeed) before anything is recorded.
pub fn decline_requested(log: &[Transition]) -> bool {
    let since = entered_review(log);
    log.iter()
        .any(|t| t.cause == DECLINE_REQUESTED && since.is_none_or(|s| t.at >= s))
}

pub fn entered_review(log: &[Transition]) -> Option<DateTime<Utc>> {
    let review = State::EnRevision.as_str();
    log.iter()
        .rev()
        .find(|t| t.to_state == review && t.from_state.as_deref() != Some(review))
        .map(|t| t.at)
}

/// The window of the gateway's listing where a charge (or refund) sent with
/// the attempt's key can be: from the first send to the last one (the
/// transitions into `EN_PROCESO`), widened by [`LISTING_MARGIN`] and the
/// longest processing time; around `created_at` when no send is logged.
pub fn listing_window(
    log: &[Transition],
    created_at: DateTime<Utc>,
    max_processing: Duration,
) -> (DateTime<Utc>, DateTime<Utc>) {
    let sending = State::EnProceso.as_str();
    let mut sends = log.iter().filter(|t| t.to_state == sending).map(|t| t.at);
    let first = sends.next().unwrap_or(created_at);
    let last = sends.next_back().unwrap_or(first);
    let margin = chrono::Duration::from_std(LISTING_MARGIN).unwrap_or_default();
    let processing = chrono::Duration::from_std(max_processing).unwrap_or_default();
    (first - margin, last + processing + margin)
}

/// What a listing says about the attempt with `key`, as a lookup would
/// have said it: an approval wins over a decline (a gateway without keys
/// may have executed the key twice; reconciliation sees the double); no
/// record is "not found"; a failed listing is a failed lookup, never "not
/// found".
pub fn listing_outcome(
    kind: Listed,
    listed: Result<Vec<GatewayRecord>, ListError>,
    key: Uuid,
    window: (DateTime<Utc>, DateTime<Utc>),
) -> LookupOutcome {
    let evidence = |kind_of: &str, result: &str, detail: String| Evidence {
        call: format!("list_{kind}"),
        error_kind: kind_of.into(),
        lookup_result: Some(result.into()),
        detail: Some(detail),
        ..Evidence::default()
    };
    let span = format!(
        "{} to {}",
        window.0.format("%Y-%m-%dT%H:%M:%SZ"),
        window.1.format("%Y-%m-%dT%H:%M:%SZ")
    );
    let records = match listed {
        Ok(records) => records,
        Err(e) => {
            return LookupOutcome::Failed {
                evidence: evidence("list_failed", "failed", e.to_string()),
            };
        }
    };
    let mine: Vec<&GatewayRecord> = records.iter().filter(|r| r.key() == Some(key)).collect();
    let detail = format!(
        "{} of {} {kind} listed {span} carry the key",
        mine.len(),
        records.len()
    );
    if let Some(r) = mine.iter().find(|r| r.is_final()) {
        return LookupOutcome::Approved {
            charge_id: r.id.clone(),
            evidence: evidence("ok", "approved", detail),
        };
    }
    // A refund the gateway accepted that may still fail: no answer yet.
    if mine.iter().any(|r| r.is_pending()) {
        return LookupOutcome::Failed {
            evidence: evidence("pending", "failed", detail),
        };
    }
    if let Some(r) = mine.first() {
        return LookupOutcome::Declined {
            code: LISTED_DECLINE_CODE.into(),
            charge_id: Some(r.id.clone()),
            evidence: evidence("declined", "declined", detail),
        };
    }
    LookupOutcome::NotFound {
        evidence: evidence("not_found", "not_found", detail),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + s, 0).unwrap()
    }

    #[test]
    fn the_default_is_5m_15m_1h_4h_12h_then_daily() {
        let s = ReviewSchedule::default();
        assert_eq!(s.first(), Duration::from_secs(300));
        let (m, h) = (60, 3600);
        // (seconds since entering review, next due in seconds since entering)
        let table = [
            (0, 5 * m),
            (5 * m - 1, 5 * m),
            (5 * m, 20 * m),
            (20 * m, 80 * m),
            (80 * m, 80 * m + 4 * h),
            (80 * m + 4 * h, 80 * m + 16 * h),
            (80 * m + 16 * h, 80 * m + 40 * h),
            (80 * m + 40 * h, 80 * m + 64 * h),
            (80 * m + 64 * h + 1, 80 * m + 88 * h),
        ];
        for (now, want) in table {
            assert_eq!(s.next_after(t(0), t(now)), t(want), "at +{now}s");
        }
        // A month later, still daily on the same grid: 80 min + 40 h + 29 days.
        assert_eq!(s.next_after(t(0), t(720 * h)), t(80 * m + 736 * h));
    }

    #[test]
    fn parse_accepts_units_and_refuses_zero_and_garbage() {
        let s = ReviewSchedule::parse("200ms, 400ms").unwrap();
        assert_eq!(s.first(), Duration::from_millis(200));
        let at = |ms| t(0) + chrono::Duration::milliseconds(ms);
        assert_eq!(s.next_after(t(0), at(199)), at(200));
        assert_eq!(s.next_after(t(0), at(200)), at(600));
        assert_eq!(s.next_after(t(0), at(1000)), at(1400));
        assert_eq!(
            ReviewSchedule::parse("1d").unwrap().first(),
            Duration::from_secs(86_400)
        );
        for bad in ["", "5m,,1h", "0s", "5m,0ms", "5 minutes", "-1h"] {
            assert!(ReviewSchedule::parse(bad).is_err(), "{bad:?}");
        }
    }

    fn tr(from: Option<&str>, to: &str, at: i64) -> Transition {
        Transition {
            id: at,
            attempt_id: Uuid::nil(),
            from_state: from.map(str::to_owned),
            to_state: to.into(),
            cause: "test".into(),
            actor: "test".into(),
            http_status: None,
            error_kind: None,
            lookup_result: None,
            evidence: None,
            at: t(at),
        }
    }

    #[test]
    fn entry_is_the_last_move_into_review_and_sends_bound_the_window() {
        let log = [
            tr(None, "PENDIENTE", 0),
            tr(Some("PENDIENTE"), "EN_PROCESO", 10),
            tr(Some("EN_PROCESO"), "DESCONOCIDO", 20),
            tr(Some("DESCONOCIDO"), "EN_REVISION", 30),
            tr(Some("EN_REVISION"), "DESCONOCIDO", 40),
            tr(Some("DESCONOCIDO"), "EN_PROCESO", 50),
            tr(Some("EN_PROCESO"), "DESCONOCIDO", 60),
            tr(Some("DESCONOCIDO"), "EN_REVISION", 70),
            tr(Some("EN_REVISION"), "EN_REVISION", 80),
        ];
        assert_eq!(entered_review(&log), Some(t(70)));
        assert_eq!(entered_review(&log[..3]), None);
        let (from, to) = listing_window(&log, t(0), Duration::from_secs(60));
        assert_eq!((from, to), (t(10 - 600), t(50 + 60 + 600)));
        let (from, to) = listing_window(&log[..1], t(0), Duration::from_secs(60));
        assert_eq!((from, to), (t(-600), t(660)));
    }

    fn rec(key: &str, id: &str, status: &str) -> GatewayRecord {
        GatewayRecord {
            kind: Listed::Charges,
            id: id.into(),
            idempotency_key: key.into(),
            order_id: "o".into(),
            amount_minor: 100,
            currency: "USD".into(),
            status: status.into(),
            charge_id: None,
            at: t(0),
        }
    }

    #[test]
    fn a_listing_answers_like_a_lookup_and_a_failed_one_is_never_not_found() {
        let key = Uuid::new_v4();
        let k = key.to_string();
        let w = (t(0), t(1));
        let out =
            |records: Vec<GatewayRecord>| listing_outcome(Listed::Charges, Ok(records), key, w);
        assert!(matches!(
            out(vec![rec("other", "ch_0", "approved"), rec(&k, "ch_1", "declined"), rec(&k, "ch_2", "approved")]),
            LookupOutcome::Approved { charge_id, .. } if charge_id == "ch_2"
        ));
        assert!(matches!(
            out(vec![rec(&k.to_uppercase(), "ch_1", "declined")]),
            LookupOutcome::Declined { code, charge_id: Some(id), .. }
                if code == LISTED_DECLINE_CODE && id == "ch_1"
        ));
        // Pending (a refund that may still fail) settles nothing: no answer.
        let pending = listing_outcome(
            Listed::Refunds,
            Ok(vec![rec(&k, "re_1", "pending")]),
            key,
            w,
        );
        assert!(
            matches!(pending, LookupOutcome::Failed { .. }),
            "{pending:?}"
        );
        let missing = out(vec![rec(&Uuid::new_v4().to_string(), "ch_9", "approved")]);
        assert!(matches!(missing, LookupOutcome::NotFound { .. }));
        assert_eq!(missing.evidence().call, "list_charges");
        let failed = listing_outcome(
            Listed::Refunds,
            Err(ListError::Status {
                kind: Listed::Refunds,
                status: 503,
            }),
            key,
            w,
        );
        assert!(matches!(failed, LookupOutcome::Failed { .. }), "{failed:?}");
    }

    #[test]
    fn a_decline_request_counts_only_since_the_attempt_last_entered_review() {
        let mut asked = tr(Some("EN_REVISION"), "EN_REVISION", 30);
        asked.cause = DECLINE_REQUESTED.into();
        let entered = |at| tr(Some("DESCONOCIDO"), "EN_REVISION", at);
        assert!(!decline_requested(&[entered(20)]));
        assert!(decline_requested(&[entered(20), asked.clone()]));
        // Asked for during an earlier stay in review: it went back to the
        // checks (a recheck) and came back; the old request is spent.
        let back = [
            entered(10),
            asked,
            tr(Some("EN_REVISION"), "DESCONOCIDO", 40),
            entered(50),
        ];
        assert!(!decline_requested(&back));
    }
}
