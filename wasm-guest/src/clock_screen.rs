//! Keeps one record with a wild timestamp from stopping a target's clock.
//!
//! A target's clock is the latest event time it has seen: cadence ticks, baseline epochs
//! and the loss horizon all follow it. Nothing bounds a source's timestamps (an OTLP
//! client sends its own), so a single record stamped near `u64::MAX` would move the next
//! tick past every later event (no continuous report ever again) and a lost-records
//! report stamped so would pair no call again. The screen drops records more than
//! [`MAX_CLOCK_JUMP_NS`] from the clock, counted as `clock_outliers`, until
//! [`JUMP_CONFIRM_EVENTS`] of them in a row, all on the same side, say the clock really
//! jumped (a suspended host's wall clock, a restarted trace): then a jump ahead is taken
//! as a long silence, and a jump back restarts the target (counted as `clock_resets`).
//!
//! Batches reach it in time order, so the records near the clock are one contiguous run
//! and the common case (the whole batch near the clock) costs two comparisons.

use std::ops::Range;

use crate::event::SyscallEvent;

/// How far from a target's clock a record may be: an hour, far beyond any reordering or
/// silence a live source shows, far below the garbage it guards against.
pub const MAX_CLOCK_JUMP_NS: u64 = 3_600 * 1_000_000_000;
/// Records beyond [`MAX_CLOCK_JUMP_NS`], on one side and with none near the clock in
/// between, that confirm the clock itself jumped: more than a burst of corrupt records,
/// few enough that a real jump loses well under a second of a busy target's events.
pub const JUMP_CONFIRM_EVENTS: u64 = 64;

/// What to do with a batch (see [`ClockScreen::screen`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Screened {
    /// Ingest the whole batch.
    All,
    /// Ingest only these records (the rest are clock outliers).
    Part(Range<usize>),
    /// The clock jumped back: restart the target, then ingest the whole batch.
    Restart,
}

/// Per target: the run of records seen beyond the bound, by side.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClockScreen {
    ahead: u64,
    behind: u64,
}

impl ClockScreen {
    /// Screens a time-ordered batch against the target's clock (`None`: no event yet, so
    /// any time starts it). `outliers` is increased by the records left out.
    pub fn screen(
        &mut self,
        events: &[SyscallEvent],
        clock: Option<u64>,
        outliers: &mut u64,
    ) -> Screened {
        let (Some(now), Some(first), Some(last)) = (clock, events.first(), events.last()) else {
            return Screened::All;
        };
        let lo_ns = now.saturating_sub(MAX_CLOCK_JUMP_NS);
        let hi_ns = now.saturating_add(MAX_CLOCK_JUMP_NS);
        if first.ts_ns >= lo_ns && last.ts_ns <= hi_ns {
            *self = Self::default();
            return Screened::All;
        }
        let lo = events.partition_point(|e| e.ts_ns < lo_ns);
        let hi = events.partition_point(|e| e.ts_ns <= hi_ns).max(lo);
        let (behind, near, ahead) = (lo, hi - lo, events.len() - hi);
        if near > 0 || (behind > 0 && ahead > 0) {
            // Records near the clock: it did not jump; the others are noise.
            *self = Self::default();
            *outliers += (behind + ahead) as u64;
            return Screened::Part(lo..hi);
        }
        let n = events.len() as u64;
        let run = if ahead > 0 {
            self.behind = 0;
            self.ahead = self.ahead.saturating_add(n);
            self.ahead
        } else {
            self.ahead = 0;
            self.behind = self.behind.saturating_add(n);
            self.behind
        };
        if run < JUMP_CONFIRM_EVENTS {
            *outliers += n;
            return Screened::Part(0..0);
        }
        let back = behind > 0;
        *self = Self::default();
        if back {
            Screened::Restart
        } else {
            Screened::All
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syscalls::SyscallId;

    fn at(ts: &[u64]) -> Vec<SyscallEvent> {
        ts.iter()
            .map(|&t| SyscallEvent::complete(1, 1, SyscallId(1), t, 10))
            .collect()
    }

    const H: u64 = MAX_CLOCK_JUMP_NS;

    #[test]
    fn batches_near_the_clock_pass_whole() {
        let mut s = ClockScreen::default();
        let mut out = 0;
        let now = 10 * H;
        assert_eq!(s.screen(&at(&[1, u64::MAX]), None, &mut out), Screened::All);
        let near = at(&[now - H, now, now + H]);
        assert_eq!(s.screen(&near, Some(now), &mut out), Screened::All);
        assert_eq!(out, 0);
    }

    #[test]
    fn wild_records_among_near_ones_are_left_out_and_counted() {
        let mut s = ClockScreen::default();
        let mut out = 0;
        let now = 10 * H;
        let b = at(&[0, now - 5, now + 5, now + H + 1, u64::MAX]);
        assert_eq!(s.screen(&b, Some(now), &mut out), Screened::Part(1..3));
        assert_eq!(out, 3);
    }

    #[test]
    fn a_jump_ahead_is_taken_once_confirmed() {
        let mut s = ClockScreen::default();
        let mut out = 0;
        let now = 10 * H;
        let later: Vec<u64> = (0..40).map(|i| now + 3 * H + i).collect();
        assert_eq!(
            s.screen(&at(&later), Some(now), &mut out),
            Screened::Part(0..0)
        );
        assert_eq!(out, 40);
        // A near batch in between breaks the run.
        assert_eq!(s.screen(&at(&[now]), Some(now), &mut out), Screened::All);
        assert_eq!(
            s.screen(&at(&later), Some(now), &mut out),
            Screened::Part(0..0)
        );
        assert_eq!(s.screen(&at(&later), Some(now), &mut out), Screened::All);
        assert_eq!(out, 80, "the confirming batch is not an outlier");
    }

    #[test]
    fn a_jump_back_restarts_once_confirmed() {
        let mut s = ClockScreen::default();
        let mut out = 0;
        let now = u64::MAX - 7;
        let early: Vec<u64> = (0..64).map(|i| 1_000 + i).collect();
        assert_eq!(
            s.screen(&at(&early), Some(now), &mut out),
            Screened::Restart
        );
        assert_eq!(out, 0);
        // Sides do not add up: ahead then behind starts the run again.
        let mut s = ClockScreen::default();
        let mid = 10 * H;
        let half = |base: u64| (0..32).map(|i| base + i).collect::<Vec<_>>();
        assert_eq!(
            s.screen(&at(&half(mid + 2 * H)), Some(mid), &mut out),
            Screened::Part(0..0)
        );
        assert_eq!(
            s.screen(&at(&half(0)), Some(mid), &mut out),
            Screened::Part(0..0)
        );
        assert_eq!(out, 64);
    }
}
