//! An answer's body, read with a cap: chunk by chunk, stopping as soon as
//! it passes the cap (a `Content-Length` over it is refused before any of
//! it is read). Both adapters read every body here, so a gateway, or
//! whatever answers in front of it, cannot fill a worker's memory with one
//! answer that never ends (a chunked body has no `Content-Length` to
//! check first).
//!
//! Invariant: a body is read whole, within its cap, or not at all. What a
//! body that was not read means is the caller's: the status line has
//! arrived, so a charge or refund is unknown (the gateway may have executed
//! it), and a listing page fails its listing.

/// The largest answer to one call (a charge, a refund, a lookup, an error):
/// Stripe's objects are a few KB and the simulator's smaller, so no real
/// answer comes near it.
pub(crate) const MAX_ANSWER_BYTES: usize = 1 << 20;

/// The largest page of a listing: 100 objects of a few KB each, with room
/// for expanded ones (a balance transaction's charge).
pub(crate) const MAX_PAGE_BYTES: usize = 8 << 20;

/// How much of a body is read, and what passing it is called.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cap {
    bytes: usize,
    /// What a body over the cap is, in words.
    past: &'static str,
}

impl Cap {
    /// One object: [`MAX_ANSWER_BYTES`].
    pub(crate) const ANSWER: Cap = Cap {
        bytes: MAX_ANSWER_BYTES,
        past: "an answer larger than 1 MiB",
    };
    /// One page of a list: [`MAX_PAGE_BYTES`].
    pub(crate) const PAGE: Cap = Cap {
        bytes: MAX_PAGE_BYTES,
        past: "a page larger than 8 MiB",
    };
}

/// Why a body was not read whole.
#[derive(Debug)]
pub(crate) enum Unread {
    /// The connection failed before the body ended (reset, timeout).
    Broken(reqwest::Error),
    /// The body went past its cap: what it was, in words ("an answer
    /// larger than 1 MiB").
    TooLarge(&'static str),
}

/// The body of `resp`, at most `cap`; dropping the response early closes
/// the connection, so what the gateway still sends is never read.
pub(crate) async fn read(mut resp: reqwest::Response, cap: Cap) -> Result<Vec<u8>, Unread> {
    if resp.content_length().is_some_and(|n| n > cap.bytes as u64) {
        return Err(Unread::TooLarge(cap.past));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(Unread::Broken)? {
        if body.len() + chunk.len() > cap.bytes {
            return Err(Unread::TooLarge(cap.past));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
