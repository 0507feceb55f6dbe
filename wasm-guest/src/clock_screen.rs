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
//!
//! Nearer jumps ahead are held instead ([`LeapHold`]): a record stamped seconds to
//! minutes past the clock (an OTLP client's skewed clock on one span, a corrupt trace
//! line) would move the clock there, and every report until the data caught up would
//! describe seconds no record covers yet — where a blip looks lasting and a busy thread
//! looks stopped (measured: one record 10–120 s ahead of a healthy 32-thread stream made
//! 1–8 of its 29 reports raise a verdict, and one 20 min ahead left the rest of the
//! 300 s stream with no report at all).

use std::ops::Range;

use crate::event::SyscallEvent;

/// How far from a target's clock a record may be: an hour, far beyond any reordering or
/// silence a live source shows, far below the garbage it guards against.
pub const MAX_CLOCK_JUMP_NS: u64 = 3_600 * 1_000_000_000;
/// Records beyond [`MAX_CLOCK_JUMP_NS`], on one side and with none near the clock in
/// between, that confirm the clock itself jumped: more than a burst of corrupt records,
/// few enough that a real jump loses well under a second of a busy target's events.
pub const JUMP_CONFIRM_EVENTS: u64 = 64;

/// How far past the clock a record may begin a stretch of the stream without being held
/// for confirmation ([`LeapHold`]): the default unit gap. A busy target's records are
/// microseconds apart; one more than a second past everything before it is either the
/// end of a silence or a wild timestamp, and only the records after it tell which.
pub const LEAP_NS: u64 = 1_000_000_000;

/// The records of a batch from the first one more than [`LEAP_NS`] past the clock and
/// the records before it, when fewer than [`JUMP_CONFIRM_EVENTS`]: kept out of the
/// analysis until the stream confirms the leap (the next batch reaches within
/// [`LEAP_NS`] of them, or the host moves the clock there) or refutes it (the next batch
/// stays behind them: they are clock outliers). A silence costs its first records a
/// batch's delay; a wild record does not move the clock. At most
/// [`JUMP_CONFIRM_EVENTS`] − 1 records.
#[derive(Clone, Debug, Default)]
pub struct LeapHold {
    held: Vec<SyscallEvent>,
}

impl LeapHold {
    /// Whether records are held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Bytes held on the heap.
    pub fn bytes(&self) -> usize {
        self.held.capacity() * std::mem::size_of::<SyscallEvent>()
    }

    /// The held records when the stream reached `ts_ns` confirms them (`ts_ns` within
    /// [`LEAP_NS`] of the first), which the caller ingests; `None` while still held.
    pub fn confirmed_by(&mut self, ts_ns: u64) -> Option<Vec<SyscallEvent>> {
        let first = self.held.first()?.ts_ns;
        (ts_ns.saturating_add(LEAP_NS) >= first).then(|| std::mem::take(&mut self.held))
    }

    /// Decides on the held records with a time-ordered `batch`, then holds the batch's own
    /// leap: returns the records to ingest now, in time order. `outliers` is increased by
    /// held records the batch refuted. `clock`: the target's (`None` before its first
    /// record).
    pub fn pass<'a>(
        &mut self,
        batch: &'a [SyscallEvent],
        clock: Option<u64>,
        outliers: &mut u64,
    ) -> std::borrow::Cow<'a, [SyscallEvent]> {
        use std::borrow::Cow;
        let mut all = Cow::Borrowed(batch);
        let mut clock = clock;
        if let Some(last) = batch.last() {
            match self.confirmed_by(last.ts_ns) {
                Some(mut held) => {
                    // The leap is confirmed: the stream's time is where it went.
                    clock = held.first().map(|e| e.ts_ns).max(clock);
                    // Both parts are in time order; a stable sort of their concatenation
                    // merges them.
                    held.extend_from_slice(batch);
                    held.sort_by_key(|e| e.ts_ns);
                    all = Cow::Owned(held);
                }
                None => {
                    *outliers += self.held.len() as u64;
                    self.held.clear();
                }
            }
        }
        let Some(at) = leap_at(&all, clock) else {
            return all;
        };
        if all.len() - at >= JUMP_CONFIRM_EVENTS as usize {
            return all;
        }
        self.held.extend_from_slice(all.get(at..).unwrap_or(&[]));
        match all {
            Cow::Borrowed(b) => Cow::Borrowed(b.get(..at).unwrap_or(&[])),
            Cow::Owned(mut v) => {
                v.truncate(at);
                Cow::Owned(v)
            }
        }
    }

    /// Everything held, unconditionally (a confirmed jump of the clock came after it).
    pub fn take(&mut self) -> Vec<SyscallEvent> {
        std::mem::take(&mut self.held)
    }

    /// Drops what is held (the stream ended, or the target restarted), counting it.
    pub fn drop_held(&mut self, outliers: &mut u64) {
        *outliers += self.held.len() as u64;
        self.held = Vec::new();
    }
}

/// Index of the first record of time-ordered `batch` more than [`LEAP_NS`] past the
/// clock and every record before it (the first record starts the clock when there is
/// none). Two comparisons when the whole batch is within [`LEAP_NS`] of the clock.
fn leap_at(batch: &[SyscallEvent], clock: Option<u64>) -> Option<usize> {
    let mut prev = clock.or_else(|| batch.first().map(|e| e.ts_ns))?;
    if batch.last()?.ts_ns <= prev.saturating_add(LEAP_NS) {
        return None;
    }
    for (i, e) in batch.iter().enumerate() {
        if e.ts_ns > prev.saturating_add(LEAP_NS) {
            return Some(i);
        }
        prev = prev.max(e.ts_ns);
    }
    None
}

/// What to do with a batch (see [`ClockScreen::screen`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Screened {
    /// Ingest the whole batch.
    All,
    /// Ingest only these records (the rest are clock outliers).
    Part(Range<usize>),
    /// The clock jumped back: restart the target, then ingest the whole batch.
    Restart,
    /// The clock jumped ahead (confirmed): ingest the whole batch, held for no leap.
    Jump,
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
            Screened::Jump
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
        assert_eq!(s.screen(&at(&later), Some(now), &mut out), Screened::Jump);
        assert_eq!(out, 80, "the confirming batch is not an outlier");
    }

    const S: u64 = 1_000_000_000;

    fn ts(events: &[SyscallEvent]) -> Vec<u64> {
        events.iter().map(|e| e.ts_ns).collect()
    }

    #[test]
    fn a_leap_is_held_until_the_next_batch_confirms_it() {
        let mut h = LeapHold::default();
        let mut out = 0;
        let now = 100 * S;
        // Within a second of the clock and of each other: nothing held.
        let near = at(&[now + 1, now + S, now + 2 * S - 1]);
        assert_eq!(ts(&h.pass(&near, Some(now), &mut out)), ts(&near));
        assert!(h.is_empty());
        // A batch whose last records come 30 s later: those are held.
        let b = at(&[now + 10, now + 20, now + 30 * S, now + 30 * S + 5]);
        assert_eq!(
            ts(&h.pass(&b, Some(now), &mut out)),
            vec![now + 10, now + 20]
        );
        assert!(!h.is_empty() && h.bytes() >= 2 * std::mem::size_of::<SyscallEvent>());
        // The stream goes on from there: they come first, in time order.
        let next = at(&[now + 30 * S - S / 2, now + 30 * S + 7]);
        assert_eq!(
            ts(&h.pass(&next, Some(now + 20), &mut out)),
            vec![
                now + 30 * S - S / 2,
                now + 30 * S,
                now + 30 * S + 5,
                now + 30 * S + 7
            ]
        );
        assert!(h.is_empty());
        assert_eq!(out, 0);
    }

    #[test]
    fn a_leap_the_stream_does_not_follow_is_left_out_and_counted() {
        let mut h = LeapHold::default();
        let mut out = 0;
        let now = 100 * S;
        let wild = at(&[now + 5, now + 600 * S]);
        assert_eq!(ts(&h.pass(&wild, Some(now), &mut out)), vec![now + 5]);
        // The next batch stays near the old clock: the wild record was noise.
        let next = at(&[now + 10, now + 20]);
        assert_eq!(ts(&h.pass(&next, Some(now + 5), &mut out)), ts(&next));
        assert!(h.is_empty());
        assert_eq!(out, 1);
        // An empty batch decides nothing.
        let _ = h.pass(&wild, Some(now + 20), &mut out);
        assert_eq!(
            ts(&h.pass(&[], Some(now + 20), &mut out)),
            Vec::<u64>::new()
        );
        assert!(!h.is_empty());
        // A time from outside the stream confirms it only once it reaches the record.
        assert!(h.confirmed_by(now + 500 * S).is_none());
        assert_eq!(
            h.confirmed_by(now + 599 * S + 1).map(|v| ts(&v)),
            Some(vec![now + 600 * S])
        );
        // At the end of the stream what is held is counted.
        let _ = h.pass(&wild, Some(now + 20), &mut out);
        h.drop_held(&mut out);
        assert!(h.is_empty());
        assert_eq!(out, 2);
    }

    #[test]
    fn many_records_past_a_leap_confirm_it_at_once() {
        let mut h = LeapHold::default();
        let mut out = 0;
        let now = 100 * S;
        let resumed: Vec<u64> = (0..JUMP_CONFIRM_EVENTS).map(|i| now + 60 * S + i).collect();
        let b = at(&resumed);
        assert_eq!(ts(&h.pass(&b, Some(now), &mut out)), resumed);
        assert!(h.is_empty());
        // Without a clock the first record starts it.
        let first = at(&[now, now + 1]);
        assert_eq!(ts(&h.pass(&first, None, &mut out)), vec![now, now + 1]);
        assert_eq!(out, 0);
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
