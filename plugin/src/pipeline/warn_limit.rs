//! Rate limiting for warnings that can repeat on every batch (an engine that fails each
//! call): the first one is logged at once, then at most one per interval carrying how many
//! were not logged, so a persistent failure stays visible without flooding the log.

use std::time::{Duration, Instant};

/// Warnings of one kind: the first at once, then at most one per [`WarnLimit::new`]'s interval.
#[derive(Debug)]
pub struct WarnLimit {
    every: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl WarnLimit {
    pub const fn new(every: Duration) -> Self {
        Self {
            every,
            last: None,
            suppressed: 0,
        }
    }

    /// One more occurrence at `now`: `Some(n)` when it should be logged, `n` being the
    /// occurrences not logged since the last warning; `None` when it is only counted.
    pub fn occurred(&mut self, now: Instant) -> Option<u64> {
        let due = self
            .last
            .is_none_or(|last| now.saturating_duration_since(last) >= self.every);
        if !due {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_at_once_then_one_per_interval_with_the_count_in_between() {
        let mut w = WarnLimit::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(w.occurred(at(0)), Some(0));
        assert_eq!(w.occurred(at(1)), None);
        assert_eq!(w.occurred(at(9)), None);
        assert_eq!(w.occurred(at(10)), Some(2));
        assert_eq!(w.occurred(at(11)), None);
        assert_eq!(w.occurred(at(30)), Some(1));
    }
}
