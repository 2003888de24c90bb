//! The finance summary's sums are exact: at the amount ceiling, and past
//! the range of i64 (written as decimal text, never through a float).

use std::time::Duration;

use cobro::domain::{AMOUNT_CEILING, MaxAmount, decimal};
use cobro::finance;
use uuid::Uuid;

use super::common::{self, *};
use super::{approved, in_review};

on_both_dbs!(
    the_summary_is_exact_with_amounts_at_the_ceiling,
    the_summary_stays_exact_past_the_range_of_i64,
);

/// The JSON text's `"amount_minor":<n>` values, as written (never through
/// an f64 or an i64).
fn json_amounts(json: &str) -> Vec<String> {
    json.split("\"amount_minor\":")
        .skip(1)
        .map(|rest| rest.chars().take_while(|c| c.is_ascii_digit()).collect())
        .collect()
}

/// Finance's summary of `db` on 2026-12-01 at 08:00 UTC.
async fn summary(db: &TestDb) -> finance::Summary {
    let at = chrono::DateTime::parse_from_rfc3339("2026-12-01T08:00:00Z")
        .unwrap()
        .to_utc();
    finance::summarize(&db.store, Duration::ZERO, at)
        .await
        .unwrap()
}

async fn the_summary_is_exact_with_amounts_at_the_ceiling(db: &TestDb) {
    db.store.set_max_amount(MaxAmount::CEILING).await.unwrap();
    let n = 7;
    for i in 0..n {
        in_review(&db.store, &format!("b-sum-{i}"), AMOUNT_CEILING).await;
    }
    approved(&db.store, "b-sum-ok", AMOUNT_CEILING).await;
    let want = i128::from(AMOUNT_CEILING) * n;
    let s = summary(db).await;
    let review = s
        .totals
        .iter()
        .find(|l| l.state == "EN_REVISION" && l.kind == "charge" && l.currency == "USD")
        .unwrap();
    assert_eq!((review.count, review.amount_minor), (n as i64, want));
    assert_eq!(review.amount, "69999999999.93");
    assert_eq!(review.amount, decimal(want, "USD"));
    assert_eq!(
        s.queue.amounts,
        [("USD".to_owned(), "69999999999.93".to_owned())]
    );
    assert_eq!(s.queue.en_revision, n as usize);
    let text = s.to_text();
    assert!(text.contains("in the queue: 69999999999.93 USD"), "{text}");
    assert!(text.contains("9999999999.99"), "{text}");
    let json = serde_json::to_string(&s).unwrap();
    assert!(json_amounts(&json).contains(&want.to_string()), "{json}");
}

/// Rows above the ceiling cannot be written any more; this test takes the
/// guard off its own database to stand for amounts stored before it, and
/// shows the sums stay exact past `i64::MAX` (where PostgreSQL's bigint
/// cast, SQLite's sum() and an i64 `+=` all used to fail).
async fn the_summary_stays_exact_past_the_range_of_i64(db: &TestDb) {
    db.exec(
        "ALTER TABLE cobro.payment_attempts DROP CONSTRAINT payment_attempts_amount_minor_ceiling",
        "DROP TRIGGER amount_within_ceiling_on_insert",
        &[],
    )
    .await
    .unwrap();
    db.exec(
        "DROP TRIGGER charge_gate ON cobro.payment_attempts",
        "DROP TRIGGER charge_gate",
        &[],
    )
    .await
    .unwrap();
    let insert = |order: &'static str, state: &'static str| {
        let db = &db;
        async move {
            let (id, key) = (Uuid::new_v4().to_string(), Uuid::new_v4().to_string());
            db.exec(
                "INSERT INTO cobro.payment_attempts
                    (id, order_id, amount_minor, currency, idempotency_key, state)
                 VALUES ($3::uuid, $1, 9223372036854775807, 'USD', $4::uuid, $2)",
                "INSERT INTO payment_attempts
                    (id, order_id, amount_minor, currency, idempotency_key, state,
                     created_at, updated_at)
                 VALUES (?3, ?1, 9223372036854775807, 'USD', ?4, ?2, 0, 0)",
                &[order, state, &id, &key],
            )
            .await
        }
    };
    for order in ["b-big-1", "b-big-2", "b-big-3"] {
        insert(order, "EN_REVISION").await.unwrap();
    }
    insert("b-big-4", "RECHAZADO").await.unwrap();
    let want = i128::from(i64::MAX) * 3;
    let s = summary(db).await;
    let review = s
        .totals
        .iter()
        .find(|l| l.state == "EN_REVISION" && l.currency == "USD")
        .unwrap();
    assert_eq!((review.count, review.amount_minor), (3, want));
    assert_eq!(review.amount, "276701161105643274.21");
    assert_eq!(
        s.queue.amounts,
        [("USD".to_owned(), "276701161105643274.21".to_owned())]
    );
    assert!(s.to_text().contains("276701161105643274.21"));
    let json = serde_json::to_string(&s).unwrap();
    assert!(json_amounts(&json).contains(&want.to_string()), "{json}");
}
