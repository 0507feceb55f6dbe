//! When to try re-instantiating a WASM guest whose restart failed.
//!
//! A restart that failed once (the host is out of memory, the module no longer
//! instantiates) usually fails again at once; trying on every batch would spend the
//! engine thread on instantiations and flood the log. Attempts back off exponentially
//! from [`FIRST_DELAY`] to [`MAX_DELAY`], and a success starts over.

use std::time::{Duration, Instant};

/// Wait after the first failed restart.
pub const FIRST_DELAY: Duration = Duration::from_secs(1);
/// Longest wait between two attempts: a guest that can start again is back within a
/// minute of it becoming possible.
pub const MAX_DELAY: Duration = Duration::from_secs(60);

/// Failed attempts in a row and the earliest time of the next.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RestartBackoff {
    failures: u32,
    next: Option<Instant>,
}

impl RestartBackoff {
    /// `Ok` when an attempt may be made at `now`, else how long is left to wait.
    pub fn ready(&self, now: Instant) -> Result<(), Duration> {
        match self.next {
            Some(next) if next > now => Err(next - now),
            _ => Ok(()),
        }
    }

    /// An attempt at `now` failed: the wait until the next one.
    pub fn failed(&mut self, now: Instant) -> Duration {
        self.failures = self.failures.saturating_add(1);
        // 1 s, 2 s, 4 s, … (the shift is capped well before it could overflow).
        let doublings = (self.failures - 1).min(16);
        let delay = FIRST_DELAY.saturating_mul(1 << doublings).min(MAX_DELAY);
        self.next = Some(now + delay);
        delay
    }

    /// An attempt succeeded: the next failure waits [`FIRST_DELAY`] again.
    pub fn succeeded(&mut self) {
        *self = Self::default();
    }

    /// Failed attempts since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_a_minute_and_start_over_after_a_success() {
        let t0 = Instant::now();
        let mut b = RestartBackoff::default();
        assert_eq!(b.ready(t0), Ok(()), "the first attempt is at once");
        let waits: Vec<u64> = (0..9).map(|_| b.failed(t0).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(b.failures(), 9);
        assert_eq!(b.ready(t0), Err(MAX_DELAY));
        assert_eq!(
            b.ready(t0 + Duration::from_secs(59)),
            Err(Duration::from_secs(1))
        );
        assert_eq!(b.ready(t0 + MAX_DELAY), Ok(()));

        b.succeeded();
        assert_eq!(b.ready(t0), Ok(()));
        assert_eq!(b.failed(t0), FIRST_DELAY);
    }

    #[test]
    fn endless_failures_stay_capped() {
        let t0 = Instant::now();
        let mut b = RestartBackoff {
            failures: u32::MAX - 1,
            next: None,
        };
        assert_eq!(b.failed(t0), MAX_DELAY);
        assert_eq!(b.failed(t0), MAX_DELAY);
    }
}
