//! Time behind an interface: the engine is handed `now_ms` and never reads
//! a clock itself, so tests drive time by hand.

use std::future::Future;
use std::pin::Pin;

pub trait Clock {
    /// ms since the Unix epoch.
    fn now_ms(&self) -> i64;
    /// Waits in-process (retry backoff under 2 s, step timeouts).
    fn sleep(&self, ms: i64) -> Pin<Box<dyn Future<Output = ()> + '_>>;
}
