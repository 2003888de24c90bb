//! Reconciliation and settlement checks in a test: the window that holds
//! everything the test did.

use chrono::{TimeDelta, Utc};
use cobro::recon::Window;

/// The two hours around now: everything a test does falls in it.
pub fn around_now() -> Window {
    let now = Utc::now();
    Window::new(now - TimeDelta::hours(1), now + TimeDelta::hours(1)).unwrap()
}
