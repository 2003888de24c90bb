//! Table-driven tests for webhook signature verification, both schemes.
//! The tables are `#[rustfmt::skip]` so that one case stays one line.

use super::*;
use base64::engine::general_purpose::{STANDARD as B64, STANDARD_NO_PAD};

const NOW: i64 = 1_700_000_000;
const MSG_ID: &str = "msg_2b8Yq0cobroTest";
const BODY: &[u8] = br#"{"type":"charge.succeeded","id":"ch_1","amount":1999}"#;
const SCHEMES: [Scheme; 2] = [Scheme::StandardWebhooks, Scheme::Stripe];
const STD: Scheme = Scheme::StandardWebhooks;
const STRIPE: Scheme = Scheme::Stripe;

/// Secret seeds: the old (rotated-out) one, the current one, an unrelated one.
const OLD: u8 = 1;
const CUR: u8 = 2;
const OTHER: u8 = 3;

type Headers = Vec<(String, String)>;
type Delivery = (Headers, Vec<u8>);

fn at(ts: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(ts, 0).expect("valid timestamp")
}

/// A case-insensitive header lookup over `headers`.
fn lookup(headers: &[(String, String)]) -> impl Fn(&str) -> Option<String> + '_ {
    move |name| {
        let found = headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name));
        found.map(|(_, v)| v.clone())
    }
}

fn header(headers: &[(String, String)], name: &str) -> String {
    lookup(headers)(name).expect("header present")
}

fn raw_secret(scheme: Scheme, seed: u8) -> String {
    match scheme {
        STD => format!("whsec_{}", B64.encode([seed; 32])),
        STRIPE => format!("whsec_stripe_test_secret_{seed:03}_abcdef"),
    }
}

fn verifier(scheme: Scheme, seeds: &[u8]) -> Verifier {
    let parse = |&seed: &u8| Secret::parse(scheme, &raw_secret(scheme, seed)).expect("valid");
    Verifier::new(scheme, seeds.iter().map(parse).collect()).expect("non-empty")
}

/// The one signature entry (`v1,<b64>` / `v1=<hex>`) the `seed` secret makes.
fn token(scheme: Scheme, seed: u8, ts: i64, body: &[u8]) -> String {
    let signed = verifier(scheme, &[seed]).sign(MSG_ID, ts, body);
    match scheme {
        STD => header(&signed, "webhook-signature"),
        STRIPE => {
            let value = header(&signed, "stripe-signature");
            value.split_once(',').expect("t=…,v1=…").1.to_owned()
        }
    }
}

/// Headers carrying the timestamp text `ts` and the signature entries.
fn headers(scheme: Scheme, ts: &str, entries: &[String]) -> Headers {
    let pair = |k: &str, v: String| (k.to_owned(), v);
    match scheme {
        STD => vec![
            pair("webhook-id", MSG_ID.to_owned()),
            pair("webhook-timestamp", ts.to_owned()),
            pair("webhook-signature", entries.join(" ")),
        ],
        STRIPE => vec![pair(
            "Stripe-Signature",
            format!("t={ts},{}", entries.join(",")),
        )],
    }
}

/// A delivery signed at `ts` by the secrets `seeds`, entries in that order.
fn signed_at(s: Scheme, ts: i64, seeds: &[u8]) -> Delivery {
    let entries: Vec<String> = seeds.iter().map(|&k| token(s, k, ts, BODY)).collect();
    (headers(s, &ts.to_string(), &entries), BODY.to_vec())
}

/// A delivery at `NOW` whose only signature entry is derived from a valid one.
fn with_entry(s: Scheme, edit: impl Fn(&str) -> String) -> Delivery {
    let entry = edit(&token(s, CUR, NOW, BODY));
    (headers(s, &NOW.to_string(), &[entry]), BODY.to_vec())
}

/// A validly signed delivery whose timestamp text is replaced by `ts`.
fn with_ts_text(s: Scheme, ts: &str) -> Delivery {
    (headers(s, ts, &[token(s, CUR, NOW, BODY)]), BODY.to_vec())
}

fn flip_body_byte(s: Scheme) -> Delivery {
    let (h, mut body) = signed_at(s, NOW, &[CUR]);
    body[5] ^= 0x01;
    (h, body)
}

fn other_version(s: Scheme, entry: &str) -> String {
    let version = if s == STD { "v2" } else { "v0" };
    format!("{version}{}", &entry[2..])
}

fn unknown_versions_only(s: Scheme) -> Delivery {
    let entry = token(s, CUR, NOW, BODY);
    let entries = [
        format!("v1a{}", &entry[2..]),
        "v2".to_owned(),
        "x".to_owned(),
    ];
    (headers(s, &NOW.to_string(), &entries), BODY.to_vec())
}

/// (name, secrets the verifier holds (first = current), delivery, `Ok(ts)` or reason).
type Case = (
    &'static str,
    &'static [u8],
    fn(Scheme) -> Delivery,
    Result<i64, &'static str>,
);

#[rustfmt::skip]
const COMMON_CASES: &[Case] = &[
    ("valid",                          &[CUR],      |s| signed_at(s, NOW, &[CUR]),        Ok(NOW)),
    ("valid, both secrets held",       &[CUR, OLD], |s| signed_at(s, NOW, &[CUR]),        Ok(NOW)),
    ("old then current, both held",    &[CUR, OLD], |s| signed_at(s, NOW, &[OLD, CUR]),   Ok(NOW)),
    ("current then old, both held",    &[CUR, OLD], |s| signed_at(s, NOW, &[CUR, OLD]),   Ok(NOW)),
    ("old then current, current held", &[CUR],      |s| signed_at(s, NOW, &[OLD, CUR]),   Ok(NOW)),
    ("current then old, current held", &[CUR],      |s| signed_at(s, NOW, &[CUR, OLD]),   Ok(NOW)),
    ("only old, both held",            &[CUR, OLD], |s| signed_at(s, NOW, &[OLD]),        Ok(NOW)),
    ("only old, current held",         &[CUR],      |s| signed_at(s, NOW, &[OLD]),        Err("bad_signature")),
    ("wrong secret",                   &[CUR, OLD], |s| signed_at(s, NOW, &[OTHER]),      Err("bad_signature")),
    ("flipped body byte",              &[CUR],      flip_body_byte,                       Err("bad_signature")),
    ("signed for another timestamp",   &[CUR],      |s| with_ts_text(s, &(NOW - 1).to_string()), Err("bad_signature")),
    ("empty v1 entry",                 &[CUR],      |s| with_entry(s, |e| e[..3].to_owned()), Err("bad_signature")),
    ("truncated by one char",          &[CUR],      |s| with_entry(s, |e| e[..e.len() - 1].to_owned()), Err("bad_signature")),
    ("truncated by half",              &[CUR],      |s| with_entry(s, |e| e[..3 + (e.len() - 3) / 2].to_owned()), Err("bad_signature")),
    ("other version prefix",           &[CUR],      |s| with_entry(s, |e| other_version(s, e)), Err("bad_signature")),
    ("only unknown versions",          &[CUR],      unknown_versions_only,                Err("bad_signature")),
    ("300 s old passes",               &[CUR],      |s| signed_at(s, NOW - 300, &[CUR]),  Ok(NOW - 300)),
    ("300 s ahead passes",             &[CUR],      |s| signed_at(s, NOW + 300, &[CUR]),  Ok(NOW + 300)),
    ("301 s old",                      &[CUR],      |s| signed_at(s, NOW - 301, &[CUR]),  Err("timestamp_too_old")),
    ("301 s ahead",                    &[CUR],      |s| signed_at(s, NOW + 301, &[CUR]),  Err("timestamp_in_future")),
    ("stale and forged",               &[CUR],      |s| signed_at(s, NOW - 3600, &[OTHER]), Err("bad_signature")),
    ("timestamp not a number",         &[CUR],      |s| with_ts_text(s, "soon"),          Err("malformed_header")),
    ("timestamp with fraction",        &[CUR],      |s| with_ts_text(s, "1700000000.5"),  Err("malformed_header")),
    ("negative timestamp",             &[CUR],      |s| with_ts_text(s, "-5"),            Err("malformed_header")),
    ("timestamp overflows i64",        &[CUR],      |s| with_ts_text(s, "99999999999999999999"), Err("malformed_header")),
];

#[test]
fn common_cases_for_both_schemes() {
    for scheme in SCHEMES {
        for &(name, holds, build, expect) in COMMON_CASES {
            let (h, body) = build(scheme);
            let got = verifier(scheme, holds).verify(&lookup(&h), &body, at(NOW));
            let ctx = format!("{scheme} / {name}: {got:?}");
            match expect {
                Ok(ts) => {
                    let id = (scheme == STD).then(|| MSG_ID.to_owned());
                    assert_eq!(
                        got,
                        Ok(Verified {
                            msg_id: id,
                            timestamp: ts
                        }),
                        "{ctx}"
                    );
                }
                Err(reason) => assert_eq!(got.map_err(|r| r.reason()), Err(reason), "{ctx}"),
            }
        }
    }
}

fn std_without(name: &str) -> Headers {
    let mut h = signed_at(STD, NOW, &[CUR]).0;
    h.retain(|(k, _)| k != name);
    h
}

fn stripe_header(value: String) -> Headers {
    vec![("Stripe-Signature".to_owned(), value)]
}

#[rustfmt::skip]
fn header_shape_cases() -> Vec<(&'static str, Scheme, Headers, Rejection)> {
    use Rejection::*;
    let std_entry = token(STD, CUR, NOW, BODY);
    let stripe_entry = token(STRIPE, CUR, NOW, BODY);
    vec![
        ("no webhook-id",           STD, std_without("webhook-id"),        MissingHeader("webhook-id")),
        ("no webhook-timestamp",    STD, std_without("webhook-timestamp"), MissingHeader("webhook-timestamp")),
        ("no webhook-signature",    STD, std_without("webhook-signature"), MissingHeader("webhook-signature")),
        ("blank webhook-signature", STD, headers(STD, &NOW.to_string(), &[" ".to_owned()]), MissingHeader("webhook-signature")),
        ("bad webhook-timestamp",   STD, headers(STD, "1e9", &[std_entry]), MalformedHeader("webhook-timestamp")),
        ("another webhook-id",      STD, { let mut h = signed_at(STD, NOW, &[CUR]).0; h[0].1.push('x'); h }, NoValidSignature),
        ("301 s ahead, exact",      STD, signed_at(STD, NOW + 301, &[CUR]).0, TimestampInFuture { ahead_secs: 301 }),
        ("no Stripe-Signature",     STRIPE, Vec::new(),                    MissingHeader("stripe-signature")),
        ("blank Stripe-Signature",  STRIPE, stripe_header(" ".to_owned()), MissingHeader("stripe-signature")),
        ("no t=",                   STRIPE, stripe_header(stripe_entry.clone()), MalformedHeader("stripe-signature")),
        ("two t=",                  STRIPE, stripe_header(format!("t={NOW},t={NOW},{stripe_entry}")), MalformedHeader("stripe-signature")),
        ("empty t=",                STRIPE, stripe_header(format!("t=,{stripe_entry}")), MalformedHeader("stripe-signature")),
        ("no v1=",                  STRIPE, stripe_header(format!("t={NOW}")), NoValidSignature),
        ("301 s old, exact",        STRIPE, signed_at(STRIPE, NOW - 301, &[CUR]).0, TimestampTooOld { age_secs: 301 }),
    ]
}

#[test]
fn header_shape_cases_reject_with_exact_variant() {
    for (name, scheme, h, want) in header_shape_cases() {
        let got = verifier(scheme, &[CUR]).verify(&lookup(&h), BODY, at(NOW));
        assert_eq!(got, Err(want), "{name}");
    }
}

#[test]
fn stripe_header_tolerates_spacing_unknown_items_and_upper_case_hex() {
    let entry = token(STRIPE, CUR, NOW, BODY)
        .to_uppercase()
        .replacen("V1=", "v1=", 1);
    let h = stripe_header(format!(" t={NOW} , v0=00ff, x , {entry} "));
    let got = verifier(STRIPE, &[CUR]).verify(&lookup(&h), BODY, at(NOW));
    assert_eq!(got.map(|v| v.timestamp), Ok(NOW));
}

#[test]
fn tolerance_is_configurable() {
    for scheme in SCHEMES {
        let v = verifier(scheme, &[CUR]).with_tolerance(Duration::from_secs(10));
        let check = |ts| {
            let (h, body) = signed_at(scheme, ts, &[CUR]);
            v.verify(&lookup(&h), &body, at(NOW))
                .map_err(|r| r.reason())
        };
        assert!(
            check(NOW - 10).is_ok() && check(NOW + 10).is_ok(),
            "{scheme}"
        );
        assert_eq!(check(NOW - 11).err(), Some("timestamp_too_old"), "{scheme}");
        assert_eq!(
            check(NOW + 11).err(),
            Some("timestamp_in_future"),
            "{scheme}"
        );
    }
}

/// The published Standard Webhooks example (also used by the reference
/// libraries' test suites).
#[test]
fn standard_webhooks_known_answer() {
    let v = Verifier::from_env_value(STD, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("valid");
    let (id, ts, body) = (
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        1_614_265_330,
        br#"{"test": 2432232314}"#,
    );
    let h = v.sign(id, ts, body);
    let want = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
    assert_eq!(header(&h, "webhook-signature"), want);
    let got = v.verify(&lookup(&h), body, at(ts));
    assert_eq!(
        got,
        Ok(Verified {
            msg_id: Some(id.to_owned()),
            timestamp: ts
        })
    );
}

/// Stripe: the expected value was computed independently with Python's
/// `hmac` module (key = the whole secret string, message = `{t}.{body}`).
#[test]
fn stripe_cross_check_with_independent_hmac() {
    let v = Verifier::from_env_value(STRIPE, "whsec_cobro_stripe_kat_0123456789").expect("valid");
    let body = br#"{"id":"evt_kat"}"#;
    let h = v.sign("ignored", NOW, body);
    let want = "t=1700000000,v1=38853e0b09f31cb20d7d5ea790fd69822f1104d2abb1002420b8f97ea4317221";
    assert_eq!(header(&h, "stripe-signature"), want);
    assert_eq!(
        v.verify(&lookup(&h), body, at(NOW)).map(|v| v.msg_id),
        Ok(None)
    );
}

#[rustfmt::skip]
fn secret_cases() -> Vec<(Scheme, String, Result<usize, SecretError>)> {
    let too_short = |len| Err(SecretError::TooShort { len, min: 24 });
    vec![
        (STD, String::new(),                                      Err(SecretError::Empty)),
        (STD, " \n\t".to_owned(),                                 Err(SecretError::Empty)),
        (STD, "whsec_".to_owned(),                                Err(SecretError::EmptyAfterPrefix)),
        (STD, B64.encode([9u8; 32]),                              Err(SecretError::MissingPrefix)),
        (STD, "whsec_s3cr3t*not~base64!".to_owned(),              Err(SecretError::InvalidBase64)),
        (STD, format!("whsec_{}", B64.encode([7u8; 23])),         too_short(23)),
        (STD, format!("whsec_{}", B64.encode([7u8; 24])),         Ok(24)),
        (STD, format!("whsec_{}", STANDARD_NO_PAD.encode([7u8; 25])), Ok(25)),
        (STD, format!("  whsec_{}\n", B64.encode([7u8; 64])),     Ok(64)),
        (STD, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned(), Ok(24)),
        (STRIPE, String::new(),                                   Err(SecretError::Empty)),
        (STRIPE, "whsec_".to_owned(),                             too_short(6)),
        (STRIPE, "whsec_s3cr3t_012345678a".to_owned(),            too_short(23)),
        (STRIPE, "whsec_s3cr3t_0123456789a".to_owned(),           Ok(24)),
        (STRIPE, "whsec_0123456789abcdefABCDEF0123456789".to_owned(), Ok(38)),
    ]
}

#[test]
fn secret_parsing() {
    for (scheme, raw, want) in secret_cases() {
        let got = Secret::parse(scheme, &raw);
        let shown = got.as_ref().map(Secret::key_len).map_err(Clone::clone);
        assert_eq!(shown, want, "{scheme} {raw:?}");
        if let Err(e) = got {
            let (msg, key_text) = (e.to_string(), raw.trim().trim_start_matches("whsec_"));
            assert!(key_text.is_empty() || !msg.contains(key_text), "{msg}");
        }
    }
}

#[test]
fn debug_never_shows_key_material() {
    let key = b"cobro-redaction-probe-key-0123456789";
    let b64 = B64.encode(key);
    let std_raw = format!("whsec_{b64}");
    let stripe_raw = "whsec_cobro_redaction_probe_stripe_key";
    let key_bytes_debug = format!("{:?}", &key[..4])
        .trim_matches(['[', ']'])
        .to_owned();
    // The base64 text, a part of it, the key text, its byte list, its hex.
    let forbidden = [
        &b64,
        &b64[..16],
        "redaction",
        &key_bytes_debug,
        "636f62726f",
    ];
    for (scheme, raw) in [(STD, std_raw.as_str()), (STRIPE, stripe_raw)] {
        let secret = Secret::parse(scheme, raw).expect("valid");
        let verifier = Verifier::new(scheme, vec![secret.clone()]).expect("one");
        let shown = [
            format!("{secret:?}"),
            format!("{secret:#?}"),
            format!("{verifier:?}"),
            format!("{verifier:#?}"),
        ];
        for text in &shown {
            assert!(
                text.contains("key_len") || text.contains("redacted"),
                "{text}"
            );
            for bad in forbidden {
                assert!(!text.contains(bad), "{text:?} shows {bad:?}");
            }
        }
    }
}

#[test]
fn secret_lists_from_env_value() {
    let (cur, old) = (raw_secret(STD, CUR), raw_secret(STD, OLD));
    for list in [
        format!("{cur},{old}"),
        format!("{cur} {old}"),
        format!(" {cur} ,\n, {old}\n"),
    ] {
        let v = Verifier::from_env_value(STD, &list).expect("two secrets");
        assert_eq!(v.secrets.len(), 2, "{list:?}");
        // `sign` uses the first (current) secret.
        let h = v.sign(MSG_ID, NOW, BODY);
        assert!(
            verifier(STD, &[CUR])
                .verify(&lookup(&h), BODY, at(NOW))
                .is_ok()
        );
        assert!(
            verifier(STD, &[OLD])
                .verify(&lookup(&h), BODY, at(NOW))
                .is_err()
        );
    }
    for empty in ["", " ,\n,"] {
        let got = Verifier::from_env_value(STD, empty).err();
        assert_eq!(got, Some(SecretError::NoSecrets), "{empty:?}");
    }
    let got = Verifier::from_env_value(STD, &format!("{cur},{}", B64.encode([1u8; 32])));
    let error = Box::new(SecretError::MissingPrefix);
    assert_eq!(got.err(), Some(SecretError::InList { position: 2, error }));
}

#[test]
fn verifier_construction() {
    assert_eq!(
        Verifier::new(STRIPE, Vec::new()).err(),
        Some(SecretError::NoSecrets)
    );
    let std_secret = Secret::parse(STD, &raw_secret(STD, CUR)).expect("valid");
    let got = Verifier::new(STRIPE, vec![std_secret]).err();
    let want = SecretError::SchemeMismatch {
        expected: STRIPE,
        found: STD,
    };
    assert_eq!(got, Some(want));
    let v = verifier(STRIPE, &[CUR]);
    assert_eq!((v.scheme(), v.tolerance), (STRIPE, DEFAULT_TOLERANCE));
}

#[test]
fn scheme_names() {
    let cases = [
        ("standard", Some(STD)),
        ("standard-webhooks", Some(STD)),
        (" Standard-Webhooks ", Some(STD)),
        ("stripe", Some(STRIPE)),
        ("STRIPE", Some(STRIPE)),
        ("svix", None),
        ("", None),
    ];
    for (text, want) in cases {
        assert_eq!(text.parse::<Scheme>().ok(), want, "{text:?}");
    }
    for scheme in SCHEMES {
        assert_eq!(scheme.to_string().parse::<Scheme>(), Ok(scheme));
    }
}

#[test]
fn rejection_reasons_are_stable() {
    let cases = [
        (Rejection::MissingHeader("webhook-id"), "missing_header"),
        (
            Rejection::MalformedHeader("stripe-signature"),
            "malformed_header",
        ),
        (
            Rejection::TimestampTooOld { age_secs: 301 },
            "timestamp_too_old",
        ),
        (
            Rejection::TimestampInFuture { ahead_secs: 301 },
            "timestamp_in_future",
        ),
        (Rejection::NoValidSignature, "bad_signature"),
    ];
    for (rejection, reason) in cases {
        assert_eq!(rejection.reason(), reason);
    }
}
