//! Per-target quarantine after repeated guest traps.
//!
//! A WASM guest that traps is restarted, and every target's analysis state goes with it.
//! When one target's own calls keep trapping (a batch shape or a state that breaks the
//! analysis, a target whose state alone outgrows `memory_limit_bytes`), every other
//! target would lose its state, and its reports, each time. So a target whose calls
//! trapped [`TRAPS_TO_QUARANTINE`] times within [`TRAP_WINDOW`] is set aside: its
//! batches are dropped (counted as `quarantined`) for [`FIRST_QUARANTINE`], doubled for
//! each repeat that follows within [`MAX_QUARANTINE`] of the last one, at most
//! [`MAX_QUARANTINE`]. Then it is analysed again from scratch.
//!
//! Only calls made for one target (its batches, its triggers) count against it. The
//! clock is the wall clock: traps are the host's events, not the target's.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Traps of one target's calls within [`TRAP_WINDOW`] that quarantine it.
pub const TRAPS_TO_QUARANTINE: usize = 3;

/// How far back its traps are counted. A guest restarts in milliseconds, so traps that
/// recur within minutes are the same cause coming back, not bad luck.
pub const TRAP_WINDOW: Duration = Duration::from_secs(600);

/// The first quarantine of a target: long enough that a burst of bad input has passed,
/// short enough that a target quarantined by a transient cause is soon analysed again.
pub const FIRST_QUARANTINE: Duration = Duration::from_secs(300);

/// The longest quarantine; a target quarantined again within this long after its last
/// one ended gets twice the last length (up to this), later ones start from the first.
pub const MAX_QUARANTINE: Duration = Duration::from_secs(3600);

/// What [`Quarantine::record_trap`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrapOutcome {
    /// Counted; the target is still analysed.
    Counted { traps: usize },
    /// The target is quarantined for `length`, from now.
    Quarantined { length: Duration },
}

#[derive(Debug, Default)]
struct Entry {
    /// Recent traps of its calls, oldest first (at most [`TRAPS_TO_QUARANTINE`]).
    traps: VecDeque<Instant>,
    /// When its current quarantine ends.
    until: Option<Instant>,
    /// The last quarantine's length and end, for the next one's length.
    last: Option<(Duration, Instant)>,
}

impl Entry {
    /// Whether the entry still matters: a recent trap, a quarantine, or one recent
    /// enough to lengthen the next.
    fn live(&self, now: Instant) -> bool {
        self.until.is_some()
            || self
                .traps
                .back()
                .is_some_and(|t| now.saturating_duration_since(*t) < TRAP_WINDOW)
            || self
                .last
                .is_some_and(|(_, end)| now.saturating_duration_since(end) < MAX_QUARANTINE)
    }
}

/// Trap counts and quarantines by target. Entries exist only for targets that trapped,
/// and go once they no longer matter, so it is bounded by the targets routed
/// (`analysis.max_targets`).
#[derive(Debug, Default)]
pub struct Quarantine {
    entries: HashMap<Arc<str>, Entry>,
}

impl Quarantine {
    /// A trap of a call made for `target` at `now`.
    pub fn record_trap(&mut self, target: &Arc<str>, now: Instant) -> TrapOutcome {
        self.entries.retain(|_, e| e.live(now));
        let e = self.entries.entry(target.clone()).or_default();
        if e.until.is_some_and(|u| now < u) {
            // A trigger answered before the quarantine began; nothing more to decide.
            return TrapOutcome::Counted {
                traps: e.traps.len(),
            };
        }
        while e
            .traps
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= TRAP_WINDOW)
        {
            e.traps.pop_front();
        }
        e.traps.push_back(now);
        if e.traps.len() < TRAPS_TO_QUARANTINE {
            return TrapOutcome::Counted {
                traps: e.traps.len(),
            };
        }
        let length = match e.last {
            Some((len, end)) if now.saturating_duration_since(end) < MAX_QUARANTINE => {
                (len * 2).min(MAX_QUARANTINE)
            }
            _ => FIRST_QUARANTINE,
        };
        e.traps.clear();
        e.until = Some(now + length);
        e.last = Some((length, now + length));
        TrapOutcome::Quarantined { length }
    }

    /// When `target`'s quarantine ends, if it is quarantined at `now`.
    pub fn until(&self, target: &str, now: Instant) -> Option<Instant> {
        self.entries
            .get(target)
            .and_then(|e| e.until)
            .filter(|u| now < *u)
    }

    /// Ends the quarantines that are over at `now`; returns those targets.
    pub fn expire(&mut self, now: Instant) -> Vec<Arc<str>> {
        let mut over = Vec::new();
        for (t, e) in &mut self.entries {
            if e.until.is_some_and(|u| now >= u) {
                e.until = None;
                over.push(t.clone());
            }
        }
        over
    }

    /// Targets quarantined at `now`.
    pub fn active(&self, now: Instant) -> usize {
        self.entries
            .values()
            .filter(|e| e.until.is_some_and(|u| now < u))
            .count()
    }

    /// Forgets `target` (the router evicted it; a new target of that name starts clean).
    pub fn forget(&mut self, target: &str) {
        self.entries.remove(target);
    }

    /// Targets with an entry: 0 lets the caller skip its clock read per batch.
    pub fn tracked(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    #[test]
    fn the_third_trap_within_the_window_quarantines_and_the_next_doubles() {
        let mut q = Quarantine::default();
        let t0 = Instant::now();
        let db = name("db");
        assert_eq!(q.record_trap(&db, t0), TrapOutcome::Counted { traps: 1 });
        assert_eq!(
            q.record_trap(&db, t0 + Duration::from_secs(60)),
            TrapOutcome::Counted { traps: 2 }
        );
        let third = t0 + Duration::from_secs(120);
        assert_eq!(
            q.record_trap(&db, third),
            TrapOutcome::Quarantined {
                length: FIRST_QUARANTINE
            }
        );
        assert_eq!(q.until("db", third), Some(third + FIRST_QUARANTINE));
        assert_eq!(q.active(third), 1);
        assert_eq!(q.until("web", third), None);

        let over = third + FIRST_QUARANTINE;
        assert_eq!(q.until("db", over), None);
        assert_eq!(q.expire(over), vec![db.clone()]);
        assert_eq!(q.active(over), 0);
        assert!(q.expire(over).is_empty(), "expired once");

        // Trapping again soon after: twice as long, then capped.
        let mut at = over;
        let mut lengths = Vec::new();
        for _ in 0..6 {
            let mut outcome = TrapOutcome::Counted { traps: 0 };
            for _ in 0..TRAPS_TO_QUARANTINE {
                at += Duration::from_secs(1);
                outcome = q.record_trap(&db, at);
            }
            let TrapOutcome::Quarantined { length } = outcome else {
                panic!("{outcome:?}");
            };
            lengths.push(length.as_secs());
            at += length;
            q.expire(at);
        }
        assert_eq!(lengths, [600, 1200, 2400, 3600, 3600, 3600]);

        // Quiet for longer than the longest quarantine: the next one is short again.
        at += MAX_QUARANTINE;
        let outcome = (0..TRAPS_TO_QUARANTINE)
            .map(|i| q.record_trap(&db, at + Duration::from_secs(i as u64)))
            .last();
        assert_eq!(
            outcome,
            Some(TrapOutcome::Quarantined {
                length: FIRST_QUARANTINE
            })
        );
    }

    #[test]
    fn traps_spread_wider_than_the_window_never_quarantine() {
        let mut q = Quarantine::default();
        let db = name("db");
        let t0 = Instant::now();
        for i in 0..20u64 {
            // One trap every 301 s: at most two within any 600 s.
            let outcome = q.record_trap(&db, t0 + Duration::from_secs(301 * i));
            assert!(
                matches!(outcome, TrapOutcome::Counted { traps } if traps <= 2),
                "{i}: {outcome:?}"
            );
        }
        assert_eq!(q.active(t0 + Duration::from_secs(301 * 20)), 0);
    }

    #[test]
    fn one_targets_traps_do_not_count_against_another() {
        let mut q = Quarantine::default();
        let t0 = Instant::now();
        for (i, target) in ["a", "b", "a", "b", "c"].into_iter().enumerate() {
            let outcome = q.record_trap(&name(target), t0 + Duration::from_secs(i as u64));
            assert!(
                matches!(outcome, TrapOutcome::Counted { .. }),
                "{outcome:?}"
            );
        }
        assert_eq!(q.active(t0 + Duration::from_secs(5)), 0);
    }

    #[test]
    fn entries_that_no_longer_matter_are_dropped_and_forget_clears_one() {
        let mut q = Quarantine::default();
        let t0 = Instant::now();
        for i in 0..1000u64 {
            q.record_trap(&name(&format!("helper-{i}")), t0);
        }
        assert_eq!(q.tracked(), 1000);
        // Past the window, the next trap's sweep keeps only the new entry.
        q.record_trap(&name("db"), t0 + TRAP_WINDOW);
        assert_eq!(q.tracked(), 1);
        q.forget("db");
        assert_eq!(q.tracked(), 0);
    }
}
