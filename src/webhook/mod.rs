//! Gateway webhooks: signature verification over the raw body ([`verify`])
//! and the event format ([`event`]).
//!
//! Invariant: nothing reads a webhook body before its signature and
//! timestamp have been verified.

pub mod dispute;
pub mod event;
mod verify;

pub use verify::*;
