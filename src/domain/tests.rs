//! The boundary parsers, table by table: every refusal names its field.

use super::*;

#[test]
fn every_bad_input_names_its_field() {
    let key = "8f14e45f-ceea-467f-a0e6-1c2f0d5e6a01";
    type Case<'a> = (
        &'a str,
        i64,
        &'a str,
        Option<&'a str>,
        Option<&'a str>,
        &'a str,
    );
    let cases: &[Case] = &[
        ("o-1", 0, "USD", Some(key), None, "amount_minor"),
        ("o-1", -5, "USD", Some(key), None, "amount_minor"),
        ("o-1", 100, "XXX", Some(key), None, "currency"),
        ("o-1", 100, "usd", Some(key), None, "currency"),
        ("", 100, "USD", Some(key), None, "order_id"),
        ("  ", 100, "USD", Some(key), None, "order_id"),
        (
            "o-1",
            100,
            "USD",
            Some("not-a-uuid"),
            None,
            "idempotency_key",
        ),
        (
            "o-1",
            100,
            "USD",
            Some("00000000-0000-0000-0000-000000000000"),
            None,
            "idempotency_key",
        ),
        (
            "o-1",
            100,
            "USD",
            Some(key),
            Some("4242424242424242"),
            "payment_method",
        ),
        (
            "o-1",
            100,
            "USD",
            Some(key),
            Some("pm card"),
            "payment_method",
        ),
    ];
    for (order, amount, cur, k, pm, field) in cases {
        let err = ChargeRequest::parse(order, *amount, cur, *k, *pm).unwrap_err();
        assert_eq!(
            err.field, *field,
            "input {order:?} {amount} {cur} {k:?} {pm:?}"
        );
    }
}

#[test]
fn good_input_parses_and_generates_a_key_when_missing() {
    let a = ChargeRequest::parse("o-1", 1999, "USD", None, Some("pm_card_visa")).unwrap();
    let b = ChargeRequest::parse("o-1", 1999, "USD", None, None).unwrap();
    assert_eq!(a.amount.minor(), 1999);
    assert_ne!(a.key, b.key, "each intent gets its own key");
    assert_eq!(Currency::parse("JPY").unwrap().minor_unit(), 0);
    assert_eq!(decimal(1999, "USD"), "19.99");
    assert_eq!(decimal(5, "USD"), "0.05");
    assert_eq!(decimal(1999, "JPY"), "1999");
    assert_eq!(decimal(1999, "KWD"), "1.999");
    assert_eq!(decimal(-250, "EUR"), "-2.50");
    assert_eq!(decimal(i64::MIN, "USD"), "-92233720368547758.08");
}

#[test]
fn amounts_stop_at_the_ceiling_or_at_a_lower_maximum() {
    assert_eq!(
        Amount::parse(AMOUNT_CEILING).unwrap().minor(),
        AMOUNT_CEILING
    );
    for over in [AMOUNT_CEILING + 1, i64::MAX] {
        let e = Amount::parse(over).unwrap_err();
        assert_eq!(e.field, "amount_minor");
        assert!(e.reason.contains("at most 999999999999"), "{e}");
        let e = ChargeRequest::parse("o-1", over, "USD", None, None).unwrap_err();
        assert_eq!(e.field, "amount_minor", "{e}");
    }
    let max = MaxAmount::default();
    assert_eq!(max.minor(), DEFAULT_MAX_AMOUNT);
    let within = |amount| ChargeRequest::parse_within("o-1", amount, "USD", None, None, max);
    assert!(within(DEFAULT_MAX_AMOUNT).is_ok());
    for over in [DEFAULT_MAX_AMOUNT + 1, AMOUNT_CEILING + 1, i64::MAX] {
        let e = within(over).unwrap_err();
        assert_eq!(e.field, "amount_minor");
        assert_eq!(
            e.to_string(),
            format!(
                "invalid amount_minor: must be at most 99999999 minor units \
                 (set by COBRO_MAX_AMOUNT_MINOR), got {over}"
            ),
            "the lower maximum is the one named"
        );
    }
    assert_eq!(within(0).unwrap_err().field, "amount_minor");
    let mine = MaxAmount::new(5_000, "this shop's limit").unwrap();
    let e = Amount::parse_within(5_001, mine).unwrap_err();
    assert!(e.reason.contains("at most 5000") && e.reason.contains("this shop's limit"));
    assert!(MaxAmount::new(0, "x").is_err());
    assert!(MaxAmount::new(AMOUNT_CEILING + 1, "x").is_err());
}

#[test]
fn the_configured_maximum_is_refused_above_the_ceiling() {
    assert_eq!(parse_max_amount_arg("5000").unwrap().minor(), 5_000);
    assert_eq!(
        parse_max_amount_arg("999999999999").unwrap(),
        MaxAmount::new(AMOUNT_CEILING, MAX_AMOUNT_VAR).unwrap()
    );
    for bad in ["1000000000000", "0", "-1", "1e6", "lots"] {
        let e = parse_max_amount_arg(bad).unwrap_err();
        assert!(
            e.contains("COBRO_MAX_AMOUNT_MINOR") && e.contains("999999999999"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn decimal_is_exact_for_sums_beyond_i64() {
    let sum = i128::from(i64::MAX) * 3 + 7;
    assert_eq!(decimal(sum, "USD"), "276701161105643274.28");
    assert_eq!(decimal(sum, "JPY"), "27670116110564327428");
    assert_eq!(decimal(-sum, "KWD"), "-27670116110564327.428");
    assert_eq!(decimal(i128::MIN, "JPY"), i128::MIN.to_string());
}

#[test]
fn the_character_tables_are_unicodes_categories() {
    use unicode_properties::{GeneralCategory as G, UnicodeGeneralCategory};
    for c in (0..=0x10FFFF).filter_map(char::from_u32) {
        let invisible = matches!(
            c.general_category(),
            G::Control | G::Format | G::LineSeparator | G::ParagraphSeparator
        );
        assert_eq!(in_ranges(c, INVISIBLE), invisible, "{}", code_point(c));
        assert_eq!(
            in_ranges(c, WHITESPACE),
            c.is_whitespace(),
            "{}",
            code_point(c)
        );
    }
}

#[test]
fn order_ids_refuse_invisible_characters_and_whitespace_of_any_kind_at_the_ends() {
    let long = |n: usize, c: char| std::iter::repeat_n(c, n).collect::<String>();
    let ok = [
        "o-1".to_owned(),
        "order 42".into(),
        "pedido\u{00A0}7".into(),
        "注文\u{3000}番号".into(),
        "🍕-1".into(),
        "👩\u{1F3FD}".into(),
        "cafe\u{0301}".into(),
        "\u{0301}x".into(),
        "x\u{E000}".into(),
        long(200, 'a'),
        long(200, '🍕'),
    ];
    for raw in &ok {
        assert_eq!(
            OrderId::parse(raw).map(|o| o.0).as_ref(),
            Ok(raw),
            "{raw:?}"
        );
    }
    let refused: &[(String, &str)] = &[
        (String::new(), "must not be empty"),
        (long(201, 'a'), "must be at most 200 characters, got 201"),
        (long(201, 'é'), "must be at most 200 characters, got 201"),
        (
            "o-1\u{00A0}".into(),
            "must not end with whitespace, found U+00A0",
        ),
        (
            "\u{2003}o-1".into(),
            "must not start with whitespace, found U+2003",
        ),
        (
            "o-1\u{3000}".into(),
            "must not end with whitespace, found U+3000",
        ),
        (
            " o-1".into(),
            "must not start with whitespace, found U+0020",
        ),
        ("   ".into(), "must not start with whitespace, found U+0020"),
        (
            "o-1\t".into(),
            "must not contain control or invisible format characters, found U+0009",
        ),
        (
            "o\n1".into(),
            "must not contain control or invisible format characters, found U+000A",
        ),
        (
            "o-1\u{0085}".into(),
            "must not contain control or invisible format characters, found U+0085",
        ),
        (
            "o\u{009B}1".into(),
            "must not contain control or invisible format characters, found U+009B",
        ),
        (
            "\u{FEFF}o-1".into(),
            "must not contain control or invisible format characters, found U+FEFF",
        ),
        (
            "o\u{200B}1".into(),
            "must not contain control or invisible format characters, found U+200B",
        ),
        (
            "o\u{202E}1".into(),
            "must not contain control or invisible format characters, found U+202E",
        ),
        (
            "o\u{E0041}1".into(),
            "must not contain control or invisible format characters, found U+E0041",
        ),
    ];
    for (raw, reason) in refused {
        let e = OrderId::parse(raw).unwrap_err();
        assert_eq!(
            (e.field, e.reason.as_str()),
            ("order_id", *reason),
            "{raw:?}"
        );
    }
}

#[test]
fn keys_are_read_as_postgresqls_uuid_type_reads_them() {
    let id = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11";
    let ok = [
        id,
        "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
        "a0eebc999c0b4ef8bb6d6bb9bd380a11",
        "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
        "{a0eebc999c0b4ef8bb6d6bb9bd380a11}",
        "a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11",
        "a0eebc99-9c0b4ef8-bb6d6bb9-bd380a11",
    ];
    for raw in ok {
        assert_eq!(IdempotencyKey::parse(raw).unwrap().to_string(), id, "{raw}");
    }
    let refused = [
        "",
        " a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11 ",
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
        "00000000-0000-0000-0000-000000000000",
    ];
    for raw in refused {
        assert_eq!(
            IdempotencyKey::parse(raw).unwrap_err().field,
            "idempotency_key",
            "{raw:?}"
        );
    }
}

#[test]
fn payment_method_debug_hides_the_token() {
    let pm = PaymentMethod::parse("pm_secret_token").unwrap();
    assert!(!format!("{pm:?}").contains("secret"));
}

#[test]
fn a_customer_is_an_opaque_token_under_the_payment_methods_rule() {
    let c = Customer::parse("cus_Q1a2B3c4D5e6").unwrap();
    assert_eq!(c.id(), "cus_Q1a2B3c4D5e6");
    assert!(!format!("{c:?}").contains("Q1a2"), "Debug hides it");
    for (raw, reason) in [
        ("", "must be 1-255 characters"),
        ("cus 1", "must be an opaque token"),
        ("4242424242424242", "looks like a card number"),
        ("cus_4242-4242-4242-4242", "looks like a card number"),
    ] {
        let e = Customer::parse(raw).unwrap_err();
        assert_eq!(e.field, "customer", "{raw:?}");
        assert!(e.reason.contains(reason), "{raw:?}: {e}");
    }
    let req = ChargeRequest::parse("o-1", 100, "USD", None, Some("pm_x"))
        .unwrap()
        .with_customer(Some("cus_1"))
        .unwrap();
    assert_eq!(req.customer.as_ref().map(Customer::id), Some("cus_1"));
    let e = ChargeRequest::parse("o-1", 100, "USD", None, Some("pm_x"))
        .unwrap()
        .with_customer(Some("5555555555554444"))
        .unwrap_err();
    assert_eq!(e.field, "customer");
}
