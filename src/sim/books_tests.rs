//! The books' invariants: replays and conflicts by key, in-flight keys,
//! refunds that never add up to more than their charge.

use super::*;

fn body(amount: i64) -> ChargeBody {
    ChargeBody {
        order_id: "o1".to_owned(),
        amount_minor: amount,
        currency: "EUR".to_owned(),
        payment_method: None,
    }
}

#[test]
fn idempotent_books_replay_and_conflict() {
    let mut books = Books::default();
    let first = books.execute(true, "k", &body(100), || None);
    assert!(matches!(first, Execution::Executed(ref r) if r.is_approved()));
    let again = books.execute(true, "k", &body(100), || Some("x".to_owned()));
    assert!(matches!(again, Execution::Replayed(ref r) if r.is_approved()));
    assert_eq!(
        books.execute(true, "k", &body(200), || None),
        Execution::KeyReused
    );
    let ledger = books.snapshot();
    assert_eq!(ledger.entries.len(), 1);
    assert_eq!(ledger.stats.replays, 1);
    assert_eq!(ledger.stats.executed, 1);
}

#[test]
fn in_flight_key_is_neither_replayed_nor_executed_until_settled() {
    let mut books = Books::default();
    books.begin(Kind::Charge, "k");
    assert_eq!(
        books.recall_charge(true, "k", &body(100)),
        Some(Recalled::InFlight)
    );
    // Without idempotency, and for refunds (another journal), the key means nothing.
    assert_eq!(books.recall_charge(false, "k", &body(100)), None);
    assert_eq!(books.recall_refund(true, "k", &refund_body("ch", 1)), None);
    assert_eq!(books.lookup("k"), None);
    // A reset does not forget it: its execution still ends in the books.
    books.reset();
    assert_eq!(
        books.recall_charge(true, "k", &body(100)),
        Some(Recalled::InFlight)
    );
    books.settle(Kind::Charge, "k");
    let recorded = books.record_charge("k", &body(100), None, Utc::now());
    let replayed = books.recall_charge(true, "k", &body(100));
    assert_eq!(replayed, Some(Recalled::Replayed(recorded)));
    assert_eq!(books.snapshot().stats.executed, 1);
}

#[test]
fn non_idempotent_books_append_and_lookup_first() {
    let mut books = Books::default();
    books.execute(false, "k", &body(100), || {
        Some("insufficient_funds".to_owned())
    });
    books.execute(false, "k", &body(100), || None);
    let ledger = books.snapshot();
    assert_eq!(ledger.entries.len(), 2);
    assert_eq!(
        ledger.entries.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [1, 2]
    );
    let found = books.lookup("k").map(|r| r.status);
    assert_eq!(found.as_deref(), Some(DECLINED));
    books.reset();
    assert_eq!(books.snapshot(), Ledger::default());
    assert_eq!(books.lookup("k"), None);
    let after = books.execute(false, "k", &body(1), || None);
    assert!(matches!(after, Execution::Executed(ref r) if r.charge_id == "ch_000003"));
}

/// Books holding one approved charge of `amount` EUR, and its id.
fn charged(amount: i64) -> (Books, String) {
    let mut books = Books::default();
    let charge_id = match books.execute(true, "c", &body(amount), || None) {
        Execution::Executed(r) => r.charge_id,
        other => panic!("charge not executed: {other:?}"),
    };
    (books, charge_id)
}

fn refund_body(charge_id: &str, amount: i64) -> RefundBody {
    RefundBody {
        charge_id: charge_id.to_owned(),
        order_id: "o1".to_owned(),
        amount_minor: amount,
        currency: "EUR".to_owned(),
    }
}

/// The decline code of a newly executed refund (`None` when approved).
fn refund_code(books: &mut Books, idempotent: bool, key: &str, b: &RefundBody) -> Option<String> {
    match books.refund(idempotent, key, b) {
        Execution::Executed(r) => r.decline_code,
        other => panic!("refund not executed: {other:?}"),
    }
}

#[test]
fn partial_refunds_up_to_the_charge_then_one_cent_more_is_declined() {
    let (mut books, ch) = charged(1000);
    assert_eq!(
        refund_code(&mut books, true, "r1", &refund_body(&ch, 600)),
        None
    );
    assert_eq!(
        refund_code(&mut books, true, "r2", &refund_body(&ch, 400)),
        None
    );
    assert_eq!(
        refund_code(&mut books, true, "r3", &refund_body(&ch, 1)).as_deref(),
        Some(AMOUNT_EXCEEDS_CHARGE)
    );
    let ledger = books.snapshot();
    assert_eq!(
        ledger.refunds.iter().map(|r| r.seq).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    let refunded: i64 = ledger
        .refunds_for_charge(&ch)
        .filter(|r| r.is_approved())
        .map(|r| r.amount_minor)
        .sum();
    assert_eq!(refunded, 1000);
}

#[test]
fn declined_refunds_are_recorded_but_do_not_count() {
    let (mut books, ch) = charged(1000);
    assert_eq!(
        refund_code(&mut books, true, "r1", &refund_body(&ch, 1001)).as_deref(),
        Some(AMOUNT_EXCEEDS_CHARGE)
    );
    assert_eq!(
        refund_code(&mut books, true, "r2", &refund_body(&ch, 1000)),
        None
    );
    let found = books.lookup_refund("r1").map(|r| r.status);
    assert_eq!(found.as_deref(), Some(DECLINED));
    assert_eq!(books.snapshot().refunds.len(), 2);
}

#[test]
fn refund_decline_codes() {
    let (mut books, ch) = charged(1000);
    books.execute(true, "c2", &body(500), || Some("card_declined".to_owned()));
    let declined_charge = books.lookup("c2").map(|r| r.charge_id).unwrap_or_default();
    let usd = RefundBody {
        currency: "USD".to_owned(),
        ..refund_body(&ch, 100)
    };
    let cases = [
        ("r1", refund_body("ch_unknown", 100), CHARGE_NOT_FOUND),
        (
            "r2",
            refund_body(&declined_charge, 100),
            CHARGE_NOT_APPROVED,
        ),
        ("r3", usd, CURRENCY_MISMATCH),
    ];
    for (key, b, code) in cases {
        assert_eq!(
            refund_code(&mut books, true, key, &b).as_deref(),
            Some(code)
        );
    }
    assert_eq!(
        refund_code(&mut books, true, "r4", &refund_body(&ch, 1000)),
        None
    );
}

#[test]
fn idempotent_refund_replays_and_conflicts() {
    let (mut books, ch) = charged(1000);
    let first = books.refund(true, "r", &refund_body(&ch, 300));
    assert!(matches!(first, Execution::Executed(ref r) if r.is_approved()));
    let again = books.refund(true, "r", &refund_body(&ch, 300));
    assert!(matches!(again, Execution::Replayed(ref r) if r.is_approved()));
    assert_eq!(
        books.refund(true, "r", &refund_body(&ch, 301)),
        Execution::KeyReused
    );
    // Charge and refund keys live apart: the charge's key is a new refund key.
    assert_eq!(
        refund_code(&mut books, true, "c", &refund_body(&ch, 1)),
        None
    );
    let ledger = books.snapshot();
    assert_eq!(ledger.refunds.len(), 2);
    assert_eq!((ledger.stats.refund_replays, ledger.stats.replays), (1, 0));
}

#[test]
fn non_idempotent_refunds_execute_every_time_and_reset_clears_them() {
    let (mut books, ch) = charged(1000);
    assert_eq!(
        refund_code(&mut books, false, "r", &refund_body(&ch, 400)),
        None
    );
    assert_eq!(
        refund_code(&mut books, false, "r", &refund_body(&ch, 400)),
        None
    );
    assert_eq!(
        refund_code(&mut books, false, "r", &refund_body(&ch, 400)).as_deref(),
        Some(AMOUNT_EXCEEDS_CHARGE)
    );
    let first = books.lookup_refund("r").map(|r| r.refund_id);
    assert_eq!(first.as_deref(), Some("re_000001"));
    books.reset();
    assert_eq!(books.snapshot(), Ledger::default());
    assert_eq!(books.lookup_refund("r"), None);
    let after = books.refund(false, "r", &refund_body(&ch, 1));
    assert!(matches!(
        after,
        Execution::Executed(ref r)
            if r.refund_id == "re_000004" && r.decline_code.as_deref() == Some(CHARGE_NOT_FOUND)
    ));
}
