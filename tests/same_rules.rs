//! One definition of valid input. The Rust parsers (`src/domain.rs`) and
//! PostgreSQL's `cobro.enqueue_charge` accept and refuse the same strings,
//! field by field, naming the same field with the same reason; and the
//! order-id, payment-method and customer rules give the same verdict for
//! every Unicode code point. (SQLite has no stored functions: its enqueue takes a
//! `ChargeRequest` parsed by the same Rust code.)

mod common;

use std::collections::BTreeMap;

use cobro::domain::ChargeRequest;
use common::postgres_db;
use sqlx::PgPool;

/// One field set to a value under test; the others are valid.
#[derive(Debug, Clone)]
enum Input {
    OrderId(String),
    Amount(i64),
    Currency(String),
    Key(String),
    PaymentMethod(String),
}

impl Input {
    fn field(&self) -> &'static str {
        match self {
            Input::OrderId(_) => "order_id",
            Input::Amount(_) => "amount_minor",
            Input::Currency(_) => "currency",
            Input::Key(_) => "idempotency_key",
            Input::PaymentMethod(_) => "payment_method",
        }
    }

    fn parts(&self) -> (&str, i64, &str, Option<&str>, Option<&str>) {
        let (mut order, mut amount, mut currency) = ("o-1", 1999, "USD");
        let (mut key, mut pm) = (None, Some("pm_card_visa"));
        match self {
            Input::OrderId(s) => order = s,
            Input::Amount(n) => amount = *n,
            Input::Currency(s) => currency = s,
            Input::Key(s) => key = Some(s.as_str()),
            Input::PaymentMethod(s) => pm = Some(s.as_str()),
        }
        (order, amount, currency, key, pm)
    }

    /// Whether this value can reach PostgreSQL at all: `text` cannot hold
    /// U+0000 (the server refuses the bytes, SQLSTATE 22021, before any
    /// function runs).
    fn has_nul(&self) -> bool {
        match self {
            Input::OrderId(s) | Input::Currency(s) | Input::Key(s) | Input::PaymentMethod(s) => {
                s.contains('\0')
            }
            Input::Amount(_) => false,
        }
    }
}

fn rep(c: char, n: usize) -> String {
    std::iter::repeat_n(c, n).collect()
}

fn inputs() -> Vec<Input> {
    use Input::*;
    let mut v: Vec<Input> = [
        // plain, and whitespace of every kind at either end and inside
        "o-1",
        "order 42",
        "pedido\u{00A0}7",
        "o-1\u{00A0}",
        "\u{00A0}o-1",
        "o-1\u{2003}",
        "\u{2003}o-1",
        "o-1\u{3000}",
        "\u{3000}o-1",
        "注文\u{3000}番号",
        "o-1\u{FEFF}",
        "\u{FEFF}o-1",
        "o\u{FEFF}1",
        "o-1 ",
        " o-1",
        "   ",
        "\to-1",
        "o-1\t",
        "o\t1",
        "o-1\n",
        "o\r\n1",
        "\u{000B}o",
        "o\u{000C}",
        "o\u{1680}1",
        "\u{1680}o",
        "o\u{2028}1",
        "o\u{2029}1",
        "o-1\u{205F}",
        "o-1\u{202F}",
        "o\u{180E}1",
        // controls: C0, DEL, NUL
        "",
        "o\u{0}1",
        "o\u{1}1",
        "o\u{1B}[31m",
        "o\u{1F}1",
        "o\u{7F}1",
        // invisible format characters
        "o\u{00AD}1",
        "o\u{200B}1",
        "o\u{200C}1",
        "o\u{200D}1",
        "o\u{200E}1",
        "o\u{202E}1",
        "o\u{2066}1",
        "o\u{2060}1",
        "o\u{FFF9}1",
        "o\u{E0001}1",
        "o\u{E007F}",
        "o\u{110BD}1",
        // emoji, combining marks, other scripts, odd but visible characters
        "🍕",
        "🍕-42",
        "🇪🇸-1",
        "👨\u{200D}👩\u{200D}👧",
        "👍\u{1F3FD}",
        "cafe\u{0301}",
        "\u{0301}",
        "e\u{0301}\u{0302}\u{0303}",
        "Заказ-1",
        "طلب-١",
        "x\u{E000}",
        "o\u{FFFD}1",
        "\u{FFFE}",
        "o\u{10FFFF}",
    ]
    .into_iter()
    .map(|s| OrderId(s.to_owned()))
    .collect();
    // C1 controls, every one of them
    v.extend((0x80..=0x9F).map(|cp| OrderId(format!("o{}1", char::from_u32(cp).unwrap()))));
    // lengths, counted in code points
    for (c, n) in [('a', 199), ('a', 200), ('a', 201), ('é', 200), ('é', 201)] {
        v.push(OrderId(rep(c, n)));
    }
    v.push(OrderId(rep('🍕', 200)));
    v.push(OrderId(rep('🍕', 201)));
    v.push(OrderId(format!("{}\u{0301}", rep('a', 199))));
    v.push(OrderId(format!("{}\u{0301}", rep('a', 200))));
    v.push(OrderId(format!("{} ", rep('a', 200))));

    v.extend(
        [
            1,
            1999,
            0,
            -1,
            i64::MIN,
            999_999_999_999,
            1_000_000_000_000,
            i64::MAX,
        ]
        .map(Amount),
    );
    v.extend(
        [
            "USD",
            "JPY",
            "KWD",
            "usd",
            "Usd",
            " USD",
            "USD ",
            "USD\u{00A0}",
            "\u{FEFF}USD",
            "USD\n",
            "US",
            "USDD",
            "XXX",
            "",
            "ＵＳＤ",
            "U\u{0}SD",
        ]
        .map(|s| Currency(s.to_owned())),
    );
    v.extend(
        [
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
            "a0eebc999c0b4ef8bb6d6bb9bd380a11",
            "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
            "{a0eebc999c0b4ef8bb6d6bb9bd380a11}",
            "a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11",
            "ffffffff-ffff-ffff-ffff-ffffffffffff",
            "00000000-0000-0000-0000-000000000000",
            "{00000000000000000000000000000000}",
            "",
            "not-a-uuid",
            " a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11 ",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11\u{00A0}",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11\n",
            "urn:uuid:a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a111",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1-",
            "a0eebc9-99c0b-4ef8-bb6d-6bb9bd380a11",
            "a0eebc99--9c0b-4ef8-bb6d-6bb9bd380a11",
            "-a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "g0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1１",
            "a0eebc99\u{0}9c0b-4ef8-bb6d-6bb9bd380a11",
        ]
        .map(|s| Key(s.to_owned())),
    );
    v.extend(
        [
            "pm_card_visa",
            "tok:1.2-3_4",
            "pm_12345678901",
            "pm_123456789012",
            "4242424242424242",
            "pm card",
            "pm_card_visa ",
            " pm",
            "pm\t",
            "pm\n",
            "",
            "pm_é",
            "pm_\u{00A0}",
            "pm_\u{FEFF}",
            "ＰＭ",
            "pm_\u{0}",
            "pm_🍕",
        ]
        .map(|s| PaymentMethod(s.to_owned())),
    );
    for (c, n) in [('a', 255), ('a', 256), ('é', 128), ('é', 255), ('é', 256)] {
        v.push(PaymentMethod(rep(c, n)));
    }
    v
}

/// PostgreSQL's verdict on one input: `Ok`, or `(SQLSTATE, message)`.
/// Each call runs in a transaction that is rolled back.
async fn sql_verdict(pool: &PgPool, input: &Input) -> Result<(), (String, String)> {
    let (order, amount, currency, key, pm) = input.parts();
    let mut tx = pool.begin().await.unwrap();
    let got = sqlx::query("SELECT * FROM cobro.enqueue_charge($1, $2, $3, $4::uuid, $5)")
        .bind(order)
        .bind(amount)
        .bind(currency)
        .bind(key)
        .bind(pm)
        .execute(&mut *tx)
        .await;
    tx.rollback().await.unwrap();
    got.map(|_| ()).map_err(|e| {
        let db = e.as_database_error().expect("a database error");
        (
            db.code().unwrap_or_default().into_owned(),
            db.message().to_owned(),
        )
    })
}

#[tokio::test]
async fn postgres_the_parsers_and_the_sql_function_agree_on_every_field() {
    let Some(db) = postgres_db().await else {
        return;
    };
    // The fields' own rules, up to the ceiling: the deployment's maximum
    // (the settings row) is a rule of its own (tests/bounds.rs).
    db.store
        .set_max_amount(cobro::domain::MaxAmount::CEILING)
        .await
        .unwrap();
    let pool = db.store.pg_pool().unwrap();
    let (mut accepted, mut refused) = (0, 0);
    for input in inputs() {
        let (order, amount, currency, key, pm) = input.parts();
        let rust = ChargeRequest::parse(order, amount, currency, key, pm);
        let sql = sql_verdict(pool, &input).await;
        let field = input.field();
        match (&rust, &sql) {
            (Ok(_), Ok(())) => accepted += 1,
            (Err(e), Err((code, msg))) => {
                refused += 1;
                assert_eq!(e.field, field, "{input:?}: Rust names another field: {e}");
                match code.as_str() {
                    // The function's refusal: the same field, and (but for
                    // currency, which quotes the input its own way) the same reason.
                    "22023" => {
                        let reason = msg
                            .strip_prefix(&format!("invalid {field}: "))
                            .unwrap_or_else(|| panic!("{input:?}: SQL names another field: {msg}"));
                        if field != "currency" {
                            assert_eq!(reason, e.reason, "{input:?}: the reasons differ");
                        }
                    }
                    // The uuid type refused the text before the function ran.
                    "22P02" => assert!(
                        field == "idempotency_key" && msg.contains("type uuid"),
                        "{input:?}: {code} {msg}"
                    ),
                    // text cannot hold U+0000: refused on the way in.
                    "22021" => assert!(input.has_nul(), "{input:?}: {code} {msg}"),
                    _ => panic!("{input:?}: unexpected refusal {code} {msg}"),
                }
            }
            _ => panic!("{input:?}: Rust says {rust:?}, SQL says {sql:?}"),
        }
    }
    println!("{accepted} accepted and {refused} refused alike");
    assert!(accepted >= 40 && refused >= 130, "{accepted} / {refused}");
    assert_eq!(db.attempts().await, 0, "every call was rolled back");
    db.drop_db().await;
}

/// `U+00A0`, as both sides name a character.
fn cp(c: char) -> String {
    format!("U+{:04X}", u32::from(c))
}

fn every_char() -> impl Iterator<Item = char> {
    (1..=0x10FFFF).filter_map(char::from_u32)
}

#[tokio::test]
async fn postgres_every_code_point_gets_the_same_verdict_from_rust_and_sql() {
    let Some(db) = postgres_db().await else {
        return;
    };
    let pool = db.store.pg_pool().unwrap();

    // Order ids: each character inside, first and last. Only refusals come
    // back (a few hundred of the 1,112,062 code points PostgreSQL can hold).
    type Verdicts = (i32, Option<String>, Option<String>, Option<String>);
    let rows: Vec<Verdicts> = sqlx::query_as(
        "SELECT cp, inside, first, last FROM (
            SELECT cp,
                   cobro.order_id_problem('a' || chr(cp) || 'b') AS inside,
                   cobro.order_id_problem(chr(cp) || 'b') AS first,
                   cobro.order_id_problem('a' || chr(cp)) AS last
              FROM generate_series(1, 1114111) cp
             WHERE cp NOT BETWEEN 55296 AND 57343) t
          WHERE inside IS NOT NULL OR first IS NOT NULL OR last IS NOT NULL",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let sql: BTreeMap<String, [Option<String>; 3]> = rows
        .into_iter()
        .map(|(n, a, b, c)| (cp(char::from_u32(n as u32).unwrap()), [a, b, c]))
        .collect();
    let reason = |s: String| cobro::domain::OrderId::parse(&s).err().map(|e| e.reason);
    let rust: BTreeMap<String, [Option<String>; 3]> = every_char()
        .map(|c| {
            let v = [
                reason(format!("a{c}b")),
                reason(format!("{c}b")),
                reason(format!("a{c}")),
            ];
            (cp(c), v)
        })
        .filter(|(_, v)| v.iter().any(Option::is_some))
        .collect();
    let differ: Vec<_> = rust
        .keys()
        .chain(sql.keys())
        .filter(|k| rust.get(*k) != sql.get(*k))
        .map(|k| (k, rust.get(k), sql.get(k)))
        .collect();
    assert!(differ.is_empty(), "order_id verdicts differ: {differ:?}");
    println!(
        "order_id: {} code points refused somewhere, alike",
        rust.len()
    );

    // Opaque tokens (payment methods, customers): a prefix and one
    // character, under one rule with each field's own reasons.
    let pm = |s: &str| {
        cobro::domain::PaymentMethod::parse(s)
            .err()
            .map(|e| e.reason)
    };
    token_verdicts_agree(pool, "payment_method_problem", "pm_", pm).await;
    let customer = |s: &str| cobro::domain::Customer::parse(s).err().map(|e| e.reason);
    token_verdicts_agree(pool, "customer_problem", "cus_", customer).await;
    db.drop_db().await;
}

/// `cobro.<sql_fn>(prefix || chr(cp))` (`payment_method_problem` or
/// `customer_problem`) and `rust(prefix + c)` for every
/// code point: the same reasons, the same count of each, and the same
/// accepted characters. Only the accepted ones come back, and one row per
/// reason with its count.
async fn token_verdicts_agree(
    pool: &PgPool,
    sql_fn: &str,
    prefix: &str,
    rust: impl Fn(&str) -> Option<String>,
) {
    let rows: Vec<(Option<String>, i64, Vec<i32>)> = sqlx::query_as(
        "SELECT problem, count(*), CASE WHEN problem IS NULL THEN array_agg(cp ORDER BY cp)
                                        ELSE '{}'::int[] END
           FROM (SELECT cp, CASE $2 WHEN 'customer_problem'
                                 THEN cobro.customer_problem($1 || chr(cp))
                                 ELSE cobro.payment_method_problem($1 || chr(cp)) END AS problem
                   FROM generate_series(1, 1114111) cp
                  WHERE cp NOT BETWEEN 55296 AND 57343) t
          GROUP BY problem",
    )
    .bind(prefix)
    .bind(sql_fn)
    .fetch_all(pool)
    .await
    .unwrap();
    let mut by_rust: BTreeMap<Option<String>, (i64, Vec<i32>)> = BTreeMap::new();
    for c in every_char() {
        let verdict = rust(&format!("{prefix}{c}"));
        let entry = by_rust.entry(verdict.clone()).or_default();
        entry.0 += 1;
        if verdict.is_none() {
            entry.1.push(u32::from(c) as i32);
        }
    }
    let by_sql: BTreeMap<Option<String>, (i64, Vec<i32>)> =
        rows.into_iter().map(|(p, n, cps)| (p, (n, cps))).collect();
    assert_eq!(by_rust, by_sql, "{sql_fn} verdicts differ");
    assert_eq!(by_rust[&None].0, 66, "A-Z a-z 0-9 _ - . :");
}
