//! Unit tests of the pure parts: the comparison (each discrepancy once,
//! settling only the unambiguous, confirming before calling something
//! missing) and the schedule (which window is due, how ends are written).

use std::time::Duration;

use chrono::{DateTime, NaiveTime, TimeZone, Utc};
use uuid::Uuid;

use super::*;
use crate::gateway::{Evidence, GatewayRecord, Listed, LookupOutcome};
use crate::state::State;
use crate::store::Attempt;

fn t(h: u32, m: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, h, m, 0).unwrap()
}

fn window() -> Window {
    Window::new(t(0, 0), t(23, 59)).unwrap()
}

fn attempt(order: &str, amount: i64, state: State, gateway_id: Option<&str>) -> Attempt {
    Attempt {
        id: Uuid::new_v4(),
        order_id: order.into(),
        amount_minor: amount,
        currency: "EUR".into(),
        payment_method: None,
        customer: None,
        idempotency_key: Uuid::new_v4(),
        state,
        kind: "initial".into(),
        refund_of: None,
        attempt_number: 1,
        gateway_charge_id: gateway_id.map(str::to_owned),
        decline_code: None,
        check_count: 0,
        send_count: 1,
        next_action_at: None,
        lease_owner: None,
        lease_expires_at: None,
        version: 3,
        last_evidence: None,
        created_at: t(10, 0),
        updated_at: t(10, 0),
        parked_since: None,
        gateway_ref: None,
        cancel_reason: None,
        refund_of_gateway: None,
    }
}

fn refund_attempt(charge: &Attempt, amount: i64, state: State, id: Option<&str>) -> Attempt {
    Attempt {
        kind: "refund".into(),
        refund_of: Some(charge.id),
        ..attempt(&charge.order_id, amount, state, id)
    }
}

/// An approved charge record under `a`'s key, with `id`.
fn charge_of(a: &Attempt, id: &str) -> GatewayRecord {
    GatewayRecord {
        kind: Listed::Charges,
        id: id.into(),
        idempotency_key: a.idempotency_key.to_string(),
        order_id: a.order_id.clone(),
        amount_minor: a.amount_minor,
        currency: a.currency.clone(),
        status: "approved".into(),
        charge_id: None,
        at: t(10, 1),
    }
}

fn refund_of(r: &Attempt, id: &str, charge: &str) -> GatewayRecord {
    GatewayRecord {
        kind: Listed::Refunds,
        charge_id: Some(charge.into()),
        ..charge_of(r, id)
    }
}

/// An approved charge nobody of ours asked for.
fn foreign(order: &str, id: &str, amount: i64) -> GatewayRecord {
    GatewayRecord {
        kind: Listed::Charges,
        id: id.into(),
        idempotency_key: Uuid::new_v4().to_string(),
        order_id: order.into(),
        amount_minor: amount,
        currency: "EUR".into(),
        status: "approved".into(),
        charge_id: None,
        at: t(11, 0),
    }
}

fn kinds(c: &Comparison) -> Vec<(CaseKind, &str)> {
    c.findings
        .iter()
        .map(|f| (f.kind, f.dedupe_key.as_str()))
        .collect()
}

fn lookup_evidence() -> Evidence {
    Evidence {
        call: "lookup".into(),
        ..Evidence::default()
    }
}

#[test]
fn a_clean_window_finds_nothing() {
    let charge = attempt("o-1", 1000, State::Aprobado, Some("ch_1"));
    let refund = refund_attempt(&charge, 400, State::Aprobado, Some("re_1"));
    let mut declined = attempt("o-2", 500, State::Rechazado, None);
    declined.decline_code = Some("card_declined".into());
    let declined_there = GatewayRecord {
        status: "declined".into(),
        ..charge_of(&declined, "ch_2")
    };
    let c = compare(
        &window(),
        &[charge_of(&charge, "ch_1"), declined_there],
        &[refund_of(&refund, "re_1", "ch_1")],
        &[charge, refund, declined],
    );
    assert_eq!(c, Comparison::default());
}

#[test]
fn a_double_charge_is_one_case_not_one_per_charge() {
    let ours = attempt("o-1", 1000, State::Aprobado, Some("ch_7"));
    let records = [charge_of(&ours, "ch_7"), foreign("o-1", "ch_3", 1000)];
    let c = compare(&window(), &records, &[], std::slice::from_ref(&ours));
    assert_eq!(
        kinds(&c),
        [(CaseKind::DoubleCharge, "double_charge:o-1:ch_3,ch_7")]
    );
    let f = &c.findings[0];
    assert_eq!(f.attempt_id, Some(ours.id));
    assert_eq!(f.gateway_ref.as_deref(), Some("ch_3,ch_7"));
    // The same charges in the other order: the same case.
    let swapped = [records[1].clone(), records[0].clone()];
    let again = compare(&window(), &swapped, &[], &[ours]);
    assert_eq!(kinds(&again), kinds(&c));
}

#[test]
fn an_approved_charge_with_no_attempt_or_one_not_approved_here_is_unmatched() {
    let there = foreign("o-9", "ch_9", 700);
    let pending = attempt("o-2", 500, State::Pendiente, None);
    let declined = attempt("o-3", 500, State::Rechazado, None);
    let records = [
        there,
        charge_of(&pending, "ch_10"),
        charge_of(&declined, "ch_11"),
    ];
    let c = compare(
        &window(),
        &records,
        &[],
        &[pending.clone(), declined.clone()],
    );
    assert_eq!(
        kinds(&c),
        [
            (CaseKind::UnmatchedCharge, "unmatched_charge:ch_10"),
            (CaseKind::UnmatchedCharge, "unmatched_charge:ch_11"),
            (CaseKind::UnmatchedCharge, "unmatched_charge:ch_9"),
        ]
    );
    assert_eq!(c.findings[0].attempt_id, Some(pending.id));
    assert_eq!(c.findings[2].attempt_id, None);
    assert!(c.findings[2].details["order_attempts"].is_array());
    assert!(c.resolutions.is_empty());
}

#[test]
fn an_approved_attempt_the_listing_lacks_is_confirmed_by_lookup_first() {
    let here = attempt("o-1", 1000, State::Aprobado, Some("ch_ghost"));
    let mut yesterday = attempt("o-2", 1000, State::Aprobado, Some("ch_old"));
    yesterday.created_at = t(0, 0) - chrono::TimeDelta::hours(1);
    let c = compare(&window(), &[], &[], &[here.clone(), yesterday]);
    assert!(c.findings.is_empty(), "nothing before the lookup");
    assert_eq!(
        c.to_confirm,
        std::slice::from_ref(&here),
        "only the window's attempts"
    );

    let not_found = LookupOutcome::NotFound {
        evidence: lookup_evidence(),
    };
    let f = confirm_missing(&here, &not_found).unwrap().unwrap();
    assert_eq!(f.kind, CaseKind::MissingAtGateway);
    assert_eq!(f.dedupe_key, format!("missing_at_gateway:{}", here.id));
    let found = LookupOutcome::Approved {
        charge_id: "ch_ghost".into(),
        evidence: lookup_evidence(),
    };
    assert_eq!(
        confirm_missing(&here, &found),
        Ok(None),
        "just outside the window"
    );
    let other = LookupOutcome::Approved {
        charge_id: "ch_other".into(),
        evidence: lookup_evidence(),
    };
    assert!(confirm_missing(&here, &other).unwrap().is_some());
    let failed = LookupOutcome::Failed {
        evidence: lookup_evidence(),
    };
    assert!(
        confirm_missing(&here, &failed).is_err(),
        "no answer, no case"
    );
}

#[test]
fn amount_or_currency_mismatch_is_one_case_and_never_settles() {
    let approved = attempt("o-1", 1000, State::Aprobado, Some("ch_1"));
    let unknown = attempt("o-2", 1000, State::Desconocido, None);
    let records = [
        GatewayRecord {
            amount_minor: 999,
            ..charge_of(&approved, "ch_1")
        },
        GatewayRecord {
            currency: "USD".into(),
            ..charge_of(&unknown, "ch_2")
        },
    ];
    let c = compare(&window(), &records, &[], &[approved, unknown]);
    assert_eq!(
        kinds(&c),
        [
            (CaseKind::AmountMismatch, "amount_mismatch:ch_1"),
            (CaseKind::AmountMismatch, "amount_mismatch:ch_2"),
        ]
    );
    assert!(c.resolutions.is_empty() && c.to_confirm.is_empty());
}

#[test]
fn an_unknown_attempt_approved_under_its_key_is_settled_without_a_case() {
    let unknown = attempt("o-1", 1000, State::Desconocido, None);
    let review = attempt("o-2", 1000, State::EnRevision, None);
    let busy = attempt("o-3", 1000, State::EnProceso, None);
    let records = [
        charge_of(&unknown, "ch_1"),
        charge_of(&review, "ch_2"),
        charge_of(&busy, "ch_3"),
    ];
    let c = compare(
        &window(),
        &records,
        &[],
        &[unknown.clone(), review.clone(), busy.clone()],
    );
    assert!(c.findings.is_empty(), "{:?}", c.findings);
    let settled: Vec<(Uuid, &str)> = c
        .resolutions
        .iter()
        .map(|r| (r.attempt.id, r.record.id.as_str()))
        .collect();
    assert_eq!(settled, [(unknown.id, "ch_1"), (review.id, "ch_2")]);
    assert_eq!(c.in_flight, [busy.id]);
}

#[test]
fn two_approvals_under_one_key_are_not_unambiguous() {
    let unknown = attempt("o-1", 1000, State::Desconocido, None);
    let records = [charge_of(&unknown, "ch_1"), charge_of(&unknown, "ch_2")];
    let c = compare(&window(), &records, &[], &[unknown]);
    assert!(c.resolutions.is_empty());
    assert_eq!(
        kinds(&c),
        [(CaseKind::DoubleCharge, "double_charge:o-1:ch_1,ch_2")]
    );
}

#[test]
fn refunds_are_reconciled_like_charges() {
    let charge = attempt("o-1", 1000, State::Aprobado, Some("ch_1"));
    let missing = refund_attempt(&charge, 100, State::Aprobado, Some("re_ghost"));
    let unknown = refund_attempt(&charge, 200, State::Desconocido, None);
    let stranger = GatewayRecord {
        kind: Listed::Refunds,
        charge_id: Some("ch_1".into()),
        ..foreign("o-1", "re_9", 50)
    };
    // A refund listed under a charge's key is not that charge's refund.
    let wrong_key = refund_of(&charge, "re_10", "ch_1");
    let c = compare(
        &window(),
        &[charge_of(&charge, "ch_1")],
        &[refund_of(&unknown, "re_2", "ch_1"), stranger, wrong_key],
        &[charge, missing.clone(), unknown.clone()],
    );
    assert_eq!(
        kinds(&c),
        [
            (CaseKind::UnmatchedRefund, "unmatched_refund:re_10"),
            (CaseKind::UnmatchedRefund, "unmatched_refund:re_9"),
        ]
    );
    assert_eq!(c.resolutions.len(), 1);
    assert_eq!(c.resolutions[0].attempt.id, unknown.id);
    assert_eq!(c.to_confirm, [missing]);
}

#[test]
fn judge_on_a_settled_attempt_is_a_match_and_on_a_declined_one_a_case() {
    let mut a = attempt("o-1", 1000, State::Desconocido, None);
    let g = charge_of(&a, "ch_1");
    assert_eq!(judge(&g, Some(&a), 1), Verdict::Resolve);
    a.state = State::Aprobado;
    a.gateway_charge_id = Some("ch_1".into());
    assert_eq!(judge(&g, Some(&a), 1), Verdict::Matched);
    a.state = State::Rechazado;
    a.gateway_charge_id = None;
    assert!(
        matches!(judge(&g, Some(&a), 1), Verdict::Case(f) if f.kind == CaseKind::UnmatchedCharge)
    );
}

#[test]
fn a_pending_refund_settles_nothing_yet_but_counts_as_present() {
    let charge = attempt("o-p", 1000, State::Aprobado, Some("ch_1"));
    let mut refund = attempt("o-p", 400, State::EnRevision, None);
    refund.kind = "refund".into();
    refund.refund_of = Some(charge.id);
    let pending = GatewayRecord {
        status: "pending".into(),
        ..refund_of(&refund, "re_1", "ch_1")
    };
    assert!(pending.is_approved() && !pending.is_final());
    assert_eq!(judge(&pending, Some(&refund), 1), Verdict::InFlight);
    let c = compare(
        &window(),
        &[charge_of(&charge, "ch_1")],
        std::slice::from_ref(&pending),
        &[charge.clone(), refund.clone()],
    );
    assert!(c.resolutions.is_empty(), "{:?}", c.resolutions);
    assert_eq!(c.in_flight, [refund.id]);
    assert!(c.findings.is_empty(), "{:?}", c.findings);
    // Succeeded: the refund settles.
    let done = refund_of(&refund, "re_1", "ch_1");
    assert_eq!(judge(&done, Some(&refund), 1), Verdict::Resolve);
}

#[test]
fn a_refund_made_under_the_key_of_one_we_hold_declined_is_to_be_marked_made() {
    let charge = attempt("o-m", 1000, State::Aprobado, Some("ch_1"));
    let declined = refund_attempt(&charge, 400, State::Rechazado, None);
    let made = refund_of(&declined, "re_1", "ch_1");
    let listed = |r: &GatewayRecord| {
        compare(
            &window(),
            &[charge_of(&charge, "ch_1")],
            std::slice::from_ref(r),
            &[charge.clone(), declined.clone()],
        )
    };
    let c = listed(&made);
    assert_eq!(
        kinds(&c),
        [(CaseKind::UnmatchedRefund, "unmatched_refund:re_1")]
    );
    assert_eq!(
        c.made_after_decline,
        [(declined.clone(), "re_1".to_owned())]
    );
    // Pending (it may still fail), or of another amount: a case, no mark.
    let pending = GatewayRecord {
        status: "pending".into(),
        ..made.clone()
    };
    let other = GatewayRecord {
        amount_minor: 300,
        ..made.clone()
    };
    for r in [pending, other] {
        let c = listed(&r);
        assert_eq!(c.findings.len(), 1, "{:?}", c.findings);
        assert!(c.made_after_decline.is_empty(), "{r:?}");
    }
}

#[test]
fn the_due_window_is_the_previous_utc_day_once_the_time_has_passed() {
    let at = NaiveTime::from_hms_opt(2, 30, 0).unwrap();
    let day = |d: u32| Utc.with_ymd_and_hms(2026, 11, d, 0, 0, 0).unwrap();
    let cases = [
        // now, window from, window to
        (t(2, 30), day(29), day(30)),
        (t(23, 59), day(29), day(30)),
        (t(2, 29), day(28), day(29)),
        (t(0, 0), day(28), day(29)),
    ];
    for (now, from, to) in cases {
        assert_eq!(due_window(now, at), Window { from, to }, "at {now}");
    }
    let midnight = NaiveTime::MIN;
    assert_eq!(due_window(t(0, 0), midnight).to, day(30));
}

#[test]
fn schedule_and_window_ends_parse_or_say_why() {
    assert_eq!(ReconcileAt::parse("off"), Ok(ReconcileAt::Off));
    assert_eq!(
        ReconcileAt::parse(" 02:30 "),
        Ok(ReconcileAt::Daily(
            NaiveTime::from_hms_opt(2, 30, 0).unwrap()
        ))
    );
    for bad in ["", "25:00", "2.30", "noon"] {
        assert!(ReconcileAt::parse(bad).is_err(), "{bad:?}");
    }
    assert_eq!(parse_when("2026-11-30").unwrap(), t(0, 0));
    assert_eq!(parse_when("2026-11-30T10:00:00Z").unwrap(), t(10, 0));
    assert_eq!(parse_when("2026-11-30T11:00:00+01:00").unwrap(), t(10, 0));
    assert_eq!(parse_when("30/11/2026").unwrap_err().field, "window");
    assert_eq!(Window::new(t(1, 0), t(1, 0)).unwrap_err().field, "to");
    let w = window();
    assert!(w.contains(w.from) && !w.contains(w.to), "half-open");
}

#[test]
fn the_intraday_window_is_the_day_so_far_up_to_the_last_slot_boundary() {
    use super::schedule::{Intraday, intraday_window};
    let ten = Duration::from_secs(600);
    let w = intraday_window(t(10, 7), ten).unwrap();
    assert_eq!((w.from, w.to), (t(0, 0), t(10, 0)));
    // Workers whose clocks differ within one slot compute the same window.
    assert_eq!(intraday_window(t(10, 9), ten), Some(w));
    assert_eq!(intraday_window(t(10, 10), ten).unwrap().to, t(10, 10));
    // Right after midnight the day so far is empty: nothing is due.
    assert_eq!(intraday_window(t(0, 5), ten), None);
    assert_eq!(Intraday::parse("off"), Ok(Intraday::Off));
    assert_eq!(
        Intraday::parse("2s"),
        Ok(Intraday::Every(Duration::from_secs(2)))
    );
    for bad in ["", "0s", "500ms", "2d", "often"] {
        assert!(Intraday::parse(bad).is_err(), "{bad:?}");
    }
}
