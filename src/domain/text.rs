//! Text a stranger wrote, made fit to store: everything cobro takes out of
//! a gateway's answer (charge, PaymentIntent and refund ids, statuses,
//! decline codes, error messages, listed records) or out of a webhook
//! (event ids and types, charge ids, codes) goes through here where it is
//! parsed into cobro's types, so the engine and the store never see raw
//! gateway text.
//!
//! Two functions, one per kind of use:
//! - [`stored`] for text that is only shown and kept (codes, statuses,
//!   messages): every control character (Unicode `Cc`: the C0 controls
//!   including NUL, tab and newline, DEL, the C1 controls) is written as the
//!   six characters `\u0000`, `\u000a`, … as JSON writes it, and the result
//!   is cut to the kind's length in bytes, between two characters (never
//!   inside one, nor inside an escape), ending in `…` when cut. Tab and
//!   newline are escaped too: a gateway's message is one line, and every
//!   stored text stays one line in logs, the CSV export and the pages. The
//!   escape is for people, not reversible (a literal `\u0000` in the input
//!   reads the same).
//! - [`id`] for identifiers cobro later sends back or matches (a charge,
//!   PaymentIntent or refund id; an event id that deduplicates
//!   redeliveries): never altered. One with a control character, empty or
//!   over [`Kind::Id`]'s 255 bytes is [`UnusableId`], and every caller reads
//!   it exactly as it reads a *missing* id in the same place: an approval
//!   without a usable id is a malformed answer (unknown: looked up, never a
//!   decline, never re-sent on a guess; finance gets it if the lookups say
//!   the same), a decline keeps its decline without the id, a webhook that
//!   needs the id is refused as malformed, a listing with such an item
//!   fails. An altered id would be stored as if the gateway had said it,
//!   and every later refund, lookup or reconciliation by it would miss.
//!
//! Invariant: what [`stored`] returns holds no control character (so no
//! NUL, which PostgreSQL's `text` and `jsonb` refuse) and is at most
//! `kind.max_bytes()` bytes; what [`id`] accepts is returned byte for byte.
//! Pure: no I/O.

use std::fmt::Write as _;

/// What a text is, which sets how long it may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An identifier (or a value as long as one): 255 bytes, the database's
    /// bound on `gateway_ref` and `event_id`.
    Id,
    /// A machine word: a decline code, a status, an event type: 64 bytes
    /// (finance's own decline codes are 1-64 characters).
    Code,
    /// A human-readable message or detail: 1000 bytes.
    Message,
}

impl Kind {
    pub const fn max_bytes(self) -> usize {
        match self {
            Kind::Id => 255,
            Kind::Code => 64,
            Kind::Message => 1000,
        }
    }
}

/// Marks a text that was cut.
pub const CUT: &str = "…";

/// `raw` as it may be stored: control characters escaped, at most
/// `kind.max_bytes()` bytes, cut between characters with [`CUT`] at the
/// end. Reads no more of `raw` than it needs (a 100 KB message costs 1 KB).
pub fn stored(raw: &str, kind: Kind) -> String {
    let max = kind.max_bytes();
    let budget = max - CUT.len();
    let mut out = String::with_capacity(raw.len().min(max));
    // The length of `out` at the last unit (a character or an escape) that
    // left room for the mark.
    let mut fits = 0;
    for c in raw.chars() {
        if c.is_control() {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
        if out.len() > max {
            out.truncate(fits);
            out.push_str(CUT);
            return out;
        }
        if out.len() <= budget {
            fits = out.len();
        }
    }
    out
}

/// Why an identifier from a stranger cannot be kept as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnusableId {
    #[error("is empty")]
    Empty,
    #[error("is {bytes} bytes long, over {max}", max = Kind::Id.max_bytes())]
    TooLong { bytes: usize },
    #[error("holds the control character U+{code:04X}")]
    Control { code: u32 },
}

/// `raw` if it is an identifier cobro can store and use again as it is:
/// 1-255 bytes, no control character. Never altered.
pub fn id(raw: &str) -> Result<&str, UnusableId> {
    if raw.is_empty() {
        return Err(UnusableId::Empty);
    }
    if raw.len() > Kind::Id.max_bytes() {
        return Err(UnusableId::TooLong { bytes: raw.len() });
    }
    match raw.chars().find(|c| c.is_control()) {
        Some(c) => Err(UnusableId::Control { code: u32::from(c) }),
        None => Ok(raw),
    }
}

/// A note for the evidence and the logs on an unusable `field`: why, and
/// the id as it may be shown.
pub fn unusable(field: &str, raw: &str, why: &UnusableId) -> String {
    stored(
        &format!("{field} {why}: {}", stored(raw, Kind::Id)),
        Kind::Message,
    )
}

/// A person's free text (a finance note, why sending is paused): 1 to
/// `max_chars` characters, not only whitespace, and no control character
/// but line breaks and tabs. PostgreSQL refuses a NUL in text, so one
/// reaching the database would fail the write as if the database were
/// down; refused here, the error names the field.
pub fn note<'a>(
    field: &'static str,
    raw: &'a str,
    max_chars: usize,
    what: &str,
) -> Result<&'a str, super::InputError> {
    let refuse = |why: String| Err(super::InputError::new(field, why));
    let chars = raw.chars().count();
    if raw.trim().is_empty() || chars > max_chars {
        return refuse(format!("{what} is required (1-{max_chars} characters)"));
    }
    match raw
        .chars()
        .find(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
    {
        Some(c) => refuse(format!(
            "must not contain control characters but line breaks and tabs, found U+{:04X}",
            u32::from(c)
        )),
        None => Ok(raw),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_keeps_line_breaks_and_refuses_other_controls() {
        assert_eq!(note("note", "seen\n\tok", 10, "a note"), Ok("seen\n\tok"));
        for (raw, why) in [
            ("", "required"),
            ("  \n", "required"),
            ("12345678901", "1-10 characters"),
            ("a\0b", "U+0000"),
            ("a\u{85}b", "U+0085"),
        ] {
            let e = note("note", raw, 10, "a note").unwrap_err();
            assert_eq!(e.field, "note");
            assert!(e.to_string().contains(why), "{raw:?}: {e}");
        }
    }

    #[test]
    fn control_characters_are_escaped_and_the_rest_is_kept() {
        let cases = [
            ("insufficient_funds", "insufficient_funds"),
            ("card\0declined", r"card\u0000declined"),
            ("\0", r"\u0000"),
            ("a\tb\nc\r", r"a\u0009b\u000ac\u000d"),
            ("del\u{7f} c1\u{85}", r"del\u007f c1\u0085"),
            ("señal — ☕ 😀", "señal — ☕ 😀"),
            ("", ""),
        ];
        for (raw, want) in cases {
            assert_eq!(stored(raw, Kind::Message), want, "{raw:?}");
        }
    }

    #[test]
    fn text_at_the_bound_is_kept_and_longer_text_is_cut_with_a_mark() {
        for kind in [Kind::Id, Kind::Code, Kind::Message] {
            let max = kind.max_bytes();
            let exact = "x".repeat(max);
            assert_eq!(stored(&exact, kind), exact, "{kind:?}");
            let over = "x".repeat(max + 1);
            let cut = stored(&over, kind);
            assert_eq!(cut.len(), max, "{kind:?}");
            assert!(cut.ends_with(CUT), "{kind:?}");
            assert_eq!(cut, format!("{}{CUT}", "x".repeat(max - CUT.len())));
        }
    }

    #[test]
    fn a_cut_never_splits_a_character_or_an_escape() {
        // Every alignment of 2-, 3- and 4-byte characters against the bound.
        for c in ['ñ', '€', '😀'] {
            for pad in 0..4 {
                let raw = format!("{}{}", "a".repeat(pad), c.to_string().repeat(300));
                for kind in [Kind::Code, Kind::Id] {
                    let s = stored(&raw, kind);
                    assert!(s.len() <= kind.max_bytes(), "{c} {pad} {kind:?}");
                    assert!(s.ends_with(CUT));
                    let body = s.strip_suffix(CUT).unwrap();
                    assert!(raw.starts_with(body), "{c} {pad} {kind:?}: {s}");
                    // Cut as late as the bound allows: one more character
                    // would not have fitted.
                    assert!(body.len() + c.len_utf8() + CUT.len() > kind.max_bytes());
                }
            }
        }
        // Escapes are units too: no half `\u00…`.
        for pad in 0..6 {
            let raw = format!("{}{}", "a".repeat(pad), "\0".repeat(100));
            let s = stored(&raw, Kind::Code);
            assert!(s.len() <= 64);
            let body = s.strip_suffix(CUT).unwrap();
            let escapes = body.strip_prefix(&"a".repeat(pad)).unwrap();
            assert_eq!(escapes.len() % 6, 0, "{s}");
            assert!(escapes.split(r"\u0000").all(str::is_empty), "{s}");
        }
    }

    #[test]
    fn a_100_kb_message_of_nul_and_text_is_bounded_and_nul_free() {
        let raw = "Tarjeta rechazada\0 ".repeat(100 * 1024 / 19);
        assert!(raw.len() >= 100 * 1000);
        let s = stored(&raw, Kind::Message);
        assert!(s.len() <= 1000 && !s.contains('\0') && s.ends_with(CUT));
        assert!(s.starts_with(r"Tarjeta rechazada\u0000 Tarjeta"));
    }

    #[test]
    fn identifiers_are_kept_as_they_are_or_refused() {
        for ok in ["ch_1", "pi_3Mtw", "re_ñ", &"i".repeat(255)] {
            assert_eq!(id(ok), Ok(ok));
        }
        assert_eq!(id(""), Err(UnusableId::Empty));
        assert_eq!(
            id(&"i".repeat(256)),
            Err(UnusableId::TooLong { bytes: 256 })
        );
        // 255 bytes is the bound, not 255 characters.
        assert_eq!(id(&"€".repeat(86)), Err(UnusableId::TooLong { bytes: 258 }));
        assert_eq!(id("ch_\0"), Err(UnusableId::Control { code: 0 }));
        assert_eq!(id("ch_1\n"), Err(UnusableId::Control { code: 10 }));
        let note = unusable("charge_id", "ch_\0", &UnusableId::Control { code: 0 });
        assert_eq!(
            note,
            r"charge_id holds the control character U+0000: ch_\u0000"
        );
    }
}
