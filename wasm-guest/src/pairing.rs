//! Enter/exit pairing per thread, tolerant of lost, duplicated and reordered records.
//!
//! Each thread holds at most one pending entry (a thread is in at most one syscall at a
//! time), so pairing state is one small `Option` per thread and never grows. Every
//! irregularity is counted in [`EngineCounters`] instead of failing:
//!
//! * `lost_exits`: an entry is still pending when the thread's next entry arrives;
//! * `lost_enters`: an exit arrives with nothing pending (its entry was lost);
//! * `unmatched_exits`: an exit names a different syscall than the pending entry;
//! * `duplicate_records`: the same record seen twice (same syscall, kind and time);
//! * `out_of_order`: a record older than what the thread already reported;
//! * `pairs_across_loss`: an exit whose entry came before a reported loss of records
//!   ([`EventKind::Lost`]), so it may be a later call's exit.
//!
//! Generic exits (`syscall == UNKNOWN`, e.g. old LTTng `exit_syscall`) take the pending
//! entry's syscall.

use crate::event::{EventKind, SyscallEvent};
use crate::report::EngineCounters;
use crate::syscalls::SyscallId;

/// The entry half a thread is waiting to close.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pending {
    pub syscall: SyscallId,
    pub enter_ns: u64,
}

/// Per-thread pairing state: the pending entry and the last record, for duplicate and
/// reorder detection.
///
/// The pending entry is kept as loose fields, not an `Option<Pending>`: that takes 24
/// bytes (a tag and padding around a `u16` and a `u64`), the record 40 instead of 24,
/// and it sits among the bytes every call of the thread touches (see
/// `Thread::HOT_BYTES`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Pairer {
    /// Entry time of the pending entry (meaningful when `has_pending`).
    pending_enter_ns: u64,
    last_ts: u64,
    pending_syscall: SyscallId,
    has_pending: bool,
    last_kind: Option<EventKind>,
    last_syscall: SyscallId,
}

const _: () = assert!(std::mem::size_of::<Pairer>() == 24);

/// A finished call, ready for analysis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    pub syscall: SyscallId,
    pub enter_ns: u64,
    pub duration_ns: u64,
    /// The return value, when the source gave one (tells a timed-out wait from a woken one).
    pub ret: Option<i64>,
}

impl Pairer {
    /// The entry waiting for its exit, if any.
    #[inline(always)]
    pub fn pending(&self) -> Option<Pending> {
        self.has_pending.then_some(Pending {
            syscall: self.pending_syscall,
            enter_ns: self.pending_enter_ns,
        })
    }

    /// Whether the thread is between two calls as far as its halves say: its latest
    /// record was an exit, at or after the latest reported loss (`loss_ns`, 0: never; a
    /// loss may have taken the next call's entry). `false` inside a call, before any
    /// half, and for a source of complete calls (a complete record comes after the call,
    /// so it cannot say).
    #[inline]
    pub fn between_calls(&self, loss_ns: u64) -> bool {
        self.last_kind == Some(EventKind::Exit) && !self.has_pending && self.last_ts >= loss_ns
    }

    /// Feeds one record; returns the completed call, if this record finished one.
    #[inline]
    pub fn feed(&mut self, ev: &SyscallEvent, c: &mut EngineCounters) -> Option<Call> {
        self.feed_after_loss(ev, 0, c)
    }

    /// [`Pairer::feed`] when records were last reported lost at `loss_ns` (0: never): an
    /// exit whose entry came before that is dropped (counted), not paired, because the
    /// loss may have taken this call's exit and a later call's entry.
    #[inline]
    pub fn feed_after_loss(
        &mut self,
        ev: &SyscallEvent,
        loss_ns: u64,
        c: &mut EngineCounters,
    ) -> Option<Call> {
        // Not a call half: it must not look like a duplicate or separate a pair.
        if ev.is_scheduling() || ev.kind == EventKind::Lost {
            return None;
        }
        if self.last_kind == Some(ev.kind)
            && self.last_ts == ev.ts_ns
            && (self.last_syscall == ev.syscall || ev.syscall == SyscallId::UNKNOWN)
        {
            c.duplicate_records += 1;
            return None;
        }
        if ev.ts_ns < self.last_ts {
            c.out_of_order += 1;
        }
        self.last_kind = Some(ev.kind);
        self.last_syscall = ev.syscall;
        self.last_ts = self.last_ts.max(ev.ts_ns);
        match ev.kind {
            EventKind::Complete => Some(Call {
                syscall: ev.syscall,
                enter_ns: ev.ts_ns,
                duration_ns: ev.duration_ns,
                ret: ev.ret,
            }),
            EventKind::Enter => {
                if self.has_pending {
                    c.lost_exits += 1;
                }
                self.has_pending = true;
                self.pending_syscall = ev.syscall;
                self.pending_enter_ns = ev.ts_ns;
                None
            }
            EventKind::OnCpu
            | EventKind::OffCpu
            | EventKind::Lost
            | EventKind::Counters
            | EventKind::TcpSegments => None,
            EventKind::Exit => {
                let Some(p) = self.pending() else {
                    c.lost_enters += 1;
                    return None;
                };
                self.has_pending = false;
                if p.enter_ns < loss_ns {
                    c.pairs_across_loss += 1;
                    return None;
                }
                if ev.syscall != SyscallId::UNKNOWN
                    && p.syscall != SyscallId::UNKNOWN
                    && ev.syscall != p.syscall
                {
                    c.unmatched_exits += 1;
                    c.lost_exits += 1;
                    return None;
                }
                if ev.ts_ns < p.enter_ns {
                    // An exit before its own entry: the records crossed; drop the pair.
                    return None;
                }
                let syscall = if p.syscall == SyscallId::UNKNOWN {
                    ev.syscall
                } else {
                    p.syscall
                };
                Some(Call {
                    syscall,
                    enter_ns: p.enter_ns,
                    duration_ns: ev.ts_ns - p.enter_ns,
                    ret: ev.ret,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: SyscallId = SyscallId(1);
    const W: SyscallId = SyscallId(2);

    #[test]
    fn only_a_thread_of_halves_after_an_exit_is_between_calls() {
        let mut p = Pairer::default();
        let mut c = EngineCounters::default();
        assert!(!p.between_calls(0), "nothing seen yet");
        p.feed(&SyscallEvent::enter(1, 1, R, 100), &mut c);
        assert!(!p.between_calls(0), "in a call");
        p.feed(&SyscallEvent::exit(1, 1, R, 150, None), &mut c);
        assert!(p.between_calls(0));
        // Scheduler records change nothing.
        p.feed(&SyscallEvent::off_cpu(1, 1, 160, false), &mut c);
        assert!(p.between_calls(0));
        assert!(p.between_calls(150));
        assert!(
            !p.between_calls(151),
            "records lost after the exit may hold the next entry"
        );
        let mut q = Pairer::default();
        q.feed(&SyscallEvent::complete(1, 1, R, 100, 50), &mut c);
        assert!(!q.between_calls(0), "complete records cannot say");
    }

    #[test]
    fn pairs_and_counts_irregularities() {
        let mut p = Pairer::default();
        let mut c = EngineCounters::default();
        assert_eq!(p.feed(&SyscallEvent::enter(1, 1, R, 100), &mut c), None);
        let call = p.feed(
            &SyscallEvent::exit(1, 1, SyscallId::UNKNOWN, 150, None),
            &mut c,
        );
        assert_eq!(
            call,
            Some(Call {
                syscall: R,
                enter_ns: 100,
                duration_ns: 50,
                ret: None,
            })
        );
        // duplicate exit
        assert_eq!(
            p.feed(
                &SyscallEvent::exit(1, 1, SyscallId::UNKNOWN, 150, None),
                &mut c
            ),
            None
        );
        assert_eq!(c.duplicate_records, 1);
        // exit without entry
        assert_eq!(
            p.feed(&SyscallEvent::exit(1, 1, W, 200, None), &mut c),
            None
        );
        assert_eq!(c.lost_enters, 1);
        // entry whose exit is lost
        p.feed(&SyscallEvent::enter(1, 1, R, 300), &mut c);
        p.feed(&SyscallEvent::enter(1, 1, W, 400), &mut c);
        assert_eq!(c.lost_exits, 1);
        // mismatched exit
        assert_eq!(
            p.feed(&SyscallEvent::exit(1, 1, R, 450, None), &mut c),
            None
        );
        assert_eq!(c.unmatched_exits, 1);
        // out of order record
        p.feed(&SyscallEvent::enter(1, 1, R, 50), &mut c);
        assert_eq!(c.out_of_order, 1);
    }

    #[test]
    fn an_exit_does_not_pair_with_an_entry_before_a_reported_loss() {
        let mut p = Pairer::default();
        let mut c = EngineCounters::default();
        p.feed_after_loss(&SyscallEvent::enter(1, 1, R, 100), 0, &mut c);
        // Lost at 500: this exit may be a later call's.
        let exit = SyscallEvent::exit(1, 1, R, 900, None);
        assert_eq!(p.feed_after_loss(&exit, 500, &mut c), None);
        assert_eq!((c.pairs_across_loss, p.pending()), (1, None));
        // An entry after the loss pairs as usual.
        p.feed_after_loss(&SyscallEvent::enter(1, 1, R, 1000), 500, &mut c);
        let call = p.feed_after_loss(&SyscallEvent::exit(1, 1, R, 1040, None), 500, &mut c);
        assert_eq!(call.map(|c| (c.enter_ns, c.duration_ns)), Some((1000, 40)));
        // The report itself is no call half.
        assert_eq!(p.feed(&SyscallEvent::lost(1, 2000), &mut c), None);
        assert_eq!(c.duplicate_records + c.lost_enters + c.lost_exits, 0);
    }
}
