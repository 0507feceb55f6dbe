//! ChopStix "vital signs" of a target and of its threads, from the counters its source
//! delivers ([`EventKind::Counters`] records, or counters attached to calls).
//!
//! PerfCompass says *where* a slowdown comes from; the counters say *what the threads
//! were doing*: a thread that burns cycles with almost no cache misses and no system
//! calls is spinning, whatever its syscalls show (it makes none). The rules are in
//! [`crate::symptoms`]; this module keeps the totals they read, in bounded memory:
//!
//! * per target, one [`CounterTotals`] per cadence epoch, on the same ring as the
//!   activity counts (at most 512 rows, allocated on the first counters: a source
//!   without counters costs nothing), so a report's totals cover its window;
//! * per thread, two epochs of totals, double-buffered as ChopStix's sketches are (the
//!   epoch being filled and the one before, so a report always sees at least one whole
//!   epoch), for at most `max_threads` threads. A thread past the bound is not tracked
//!   (counted in `untracked_counter_threads`); its counters still count for the target.
//!
//! Context switches come from the counters when the source counts them, and from the
//! scheduler's switch records (perf's `sched:sched_switch`) once counters flow: perf's
//! sampled counters have none, and without them the syscall-loop rule cannot judge. A
//! thread's calls come from its syscall record's per-bin counts, which saturate at 65,535
//! per bin (about 187 k calls a second at the default window): a faster loop reads fewer
//! calls than it made.
//!
//! A thread's wall-clock span runs from the start of the older epoch to the report's end,
//! never from its first to its last sample: a thread sampled twice in 5 ms would
//! otherwise read as a core flat out.
//!
//! [`EventKind::Counters`]: crate::event::EventKind::Counters

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::event::PerfCounters;
use crate::symptoms::{symptoms_measured, CounterTotals, Symptom, Thresholds};

/// Threads listed in a report's vital signs (those showing a symptom, busy loops first, then most cycles).
pub const MAX_LISTED_THREADS: usize = 8;

/// The counters' ratios, as the rules read them (`None`: not measured).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SignRates {
    /// Cycles per wall-clock nanosecond: CPUs kept busy, in GHz (3.0 = one 3 GHz core
    /// flat out, or two at half load).
    pub cycles_per_ns: Option<f64>,
    /// Instructions per cycle.
    pub ipc: Option<f64>,
    /// Cache misses per thousand instructions.
    pub mpki: Option<f64>,
    /// System calls per million cycles.
    pub calls_per_mcycle: Option<f64>,
    /// Context switches per system call.
    pub switches_per_call: Option<f64>,
}

impl SignRates {
    /// The ratios of `c` (rounded as report floats are).
    pub fn of(c: &CounterTotals) -> Self {
        let r = |a: u64, b: u64, scale: f64| {
            (b > 0).then(|| crate::report::tidy(a as f64 / b as f64 * scale))
        };
        Self {
            cycles_per_ns: r(c.cycles, c.wall_ns, 1.0),
            ipc: r(c.instructions, c.cycles, 1.0),
            mpki: r(c.cache_misses, c.instructions, 1e3),
            calls_per_mcycle: r(c.calls, c.cycles, 1e6),
            // As the rules read it: no switch counted means none measured.
            switches_per_call: if c.context_switches > 0 {
                r(c.context_switches, c.calls, 1.0)
            } else {
                None
            },
        }
    }
}

/// One thread's vital signs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThreadSigns {
    pub tid: u32,
    pub totals: CounterTotals,
    pub rates: SignRates,
    pub symptoms: Vec<Symptom>,
}

/// The target's vital signs in a report: present only when its source delivered counters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VitalSigns {
    /// The target's totals over the report's window (`calls`: its system calls there).
    pub totals: CounterTotals,
    pub rates: SignRates,
    /// What the target's totals show.
    pub symptoms: Vec<Symptom>,
    /// Threads whose own recent counters (the last one to two cadence epochs) show a
    /// symptom, busy loops first, then most cycles, at most [`MAX_LISTED_THREADS`]: a target's totals
    /// hide one spinning thread among many busy ones.
    pub threads: Vec<ThreadSigns>,
}

/// Two epochs of one thread's counters.
#[derive(Clone, Copy, Debug, Default)]
struct ThreadCounters {
    /// Epoch (`ts / cadence`) of `cur`; `prev` is the epoch before.
    epoch: u64,
    cur: PerfCounters,
    prev: PerfCounters,
}

/// Counter totals of one target (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct SignsState {
    /// Per activity epoch; empty until the first counters arrive.
    epochs: Vec<PerfCounters>,
    /// When the first counters kept in `epochs` arrived (their start), for the span.
    first_ns: Option<u64>,
    threads: BTreeMap<u32, ThreadCounters>,
    /// The latest epoch at which a search for stale threads found none: with the map
    /// full, searching again for every record of a new thread in the same epoch would
    /// walk the whole map each time (`max_threads` entries) to find nothing again.
    full_at_epoch: Option<u64>,
    /// Whether any record counted a context switch: then a thread's zero is a measured
    /// zero (a loop whose calls never block), not a source that does not count them.
    switches_measured: bool,
}

fn add(into: &mut PerfCounters, p: &PerfCounters) {
    into.cycles = into.cycles.saturating_add(p.cycles);
    into.instructions = into.instructions.saturating_add(p.instructions);
    into.cache_misses = into.cache_misses.saturating_add(p.cache_misses);
    into.context_switches = into.context_switches.saturating_add(p.context_switches);
}

impl SignsState {
    /// Takes thread `tid`'s counters `p` over `interval_ns` ending at `ts_ns` into the
    /// current activity epoch `slot` (of `epochs`) and into the thread's epochs.
    /// Returns `false` when the thread could not be tracked (`max_threads` reached).
    #[allow(clippy::too_many_arguments)]
    pub fn add(
        &mut self,
        tid: u32,
        ts_ns: u64,
        interval_ns: u64,
        p: &PerfCounters,
        slot: usize,
        epochs: usize,
        cadence_ns: u64,
        max_threads: usize,
    ) -> bool {
        let start = ts_ns.saturating_sub(interval_ns);
        self.first_ns = Some(self.first_ns.map_or(start, |f| f.min(start)));
        self.switches_measured |= p.context_switches > 0;
        if self.epochs.len() != epochs {
            self.epochs = vec![PerfCounters::default(); epochs];
        }
        if let Some(e) = self.epochs.get_mut(slot) {
            add(e, p);
        }
        let epoch = ts_ns / cadence_ns.max(1);
        if !self.threads.contains_key(&tid) && self.threads.len() >= max_threads {
            if self.full_at_epoch.is_some_and(|e| e >= epoch) {
                return false;
            }
            // Make room from threads whose epochs both ended before this record's.
            let stale: Vec<u32> = self
                .threads
                .iter()
                .filter(|(_, t)| t.epoch.saturating_add(1) < epoch)
                .map(|(&k, _)| k)
                .take(64)
                .collect();
            if stale.is_empty() {
                self.full_at_epoch = Some(epoch);
                return false;
            }
            for k in stale {
                self.threads.remove(&k);
            }
        }
        let t = self.threads.entry(tid).or_insert(ThreadCounters {
            epoch,
            ..ThreadCounters::default()
        });
        if epoch > t.epoch || epoch.saturating_add(1) < t.epoch {
            // Forward: a new epoch. Far back: the thread's epoch came from a record
            // stamped ahead of the clock (within the clock screen's hour); restart from
            // this one rather than drop every later record as too old.
            t.prev = if epoch == t.epoch.saturating_add(1) {
                t.cur
            } else {
                PerfCounters::default()
            };
            t.cur = PerfCounters::default();
            t.epoch = epoch;
        }
        // A record of the epoch before (reordering across the boundary) goes to `prev`.
        if epoch == t.epoch {
            add(&mut t.cur, p);
        } else {
            add(&mut t.prev, p);
        }
        true
    }

    /// Clears activity epoch `slot` (the ring moved on to it).
    pub fn clear_epoch(&mut self, slot: usize) {
        if let Some(e) = self.epochs.get_mut(slot) {
            *e = PerfCounters::default();
        }
    }

    /// Forgets the threads' epochs (counted in a cadence that changed: another unit).
    pub fn reset_threads(&mut self) {
        self.threads.clear();
        self.full_at_epoch = None;
    }

    /// Forgets the per-epoch totals (the ring was rebuilt with another length).
    pub fn reset_epochs(&mut self) {
        self.epochs.clear();
        self.first_ns = None;
    }

    /// The report's vital signs for the data up to `to`: the target's totals over the
    /// kept epochs (which cover the time from `kept_from` on; `calls` system calls), and
    /// the threads whose last two epochs show a symptom. `thread_calls(tid, from, to)`
    /// counts a thread's calls (0 for a thread with no syscall record: it made none
    /// lately, or it was evicted, which the counters report). `None` without counters
    /// in the kept epochs (none ever, or none since the window moved past the last).
    pub fn report(
        &self,
        to: u64,
        kept_from: u64,
        calls: u64,
        cadence_ns: u64,
        thread_calls: impl Fn(u32, u64, u64) -> u64,
    ) -> Option<VitalSigns> {
        let first = self.first_ns?;
        let mut sum = PerfCounters::default();
        for e in &self.epochs {
            add(&mut sum, e);
        }
        if sum == PerfCounters::default() {
            // The counters stopped a window ago: no vital signs, rather than zeros that
            // would read as a target that stopped using its CPU.
            return None;
        }
        let from = kept_from.max(first).min(to);
        let totals = totals_of(&sum, calls, to - from);
        let measured = self.switches_measured;
        let cadence = cadence_ns.max(1);
        let now_epoch = to / cadence;
        let lo_epoch = now_epoch.saturating_sub(1);
        let mut threads: Vec<ThreadSigns> = Vec::new();
        // A thread's span starts with the older epoch, whenever its first record came:
        // a sampled counter's first sample covers cycles spent before it, so spans from
        // a thread's first sample would make a thread sampled twice in 5 ms read as a
        // core flat out. A thread that started late in the span reads lower than it ran.
        let from = lo_epoch.saturating_mul(cadence).min(to);
        for (&tid, t) in &self.threads {
            let mut s = PerfCounters::default();
            let older = t.epoch.checked_sub(1).map(|e| (e, &t.prev));
            for (e, c) in [Some((t.epoch, &t.cur)), older].into_iter().flatten() {
                if (lo_epoch..=now_epoch).contains(&e) {
                    add(&mut s, c);
                }
            }
            if s == PerfCounters::default() {
                continue;
            }
            let totals = totals_of(&s, thread_calls(tid, from, to), to.saturating_sub(from));
            let found = symptoms_measured(&totals, &Thresholds::default(), measured);
            if !found.is_empty() {
                threads.push(ThreadSigns {
                    tid,
                    totals,
                    rates: SignRates::of(&totals),
                    symptoms: found,
                });
            }
        }
        // Busy loops first: eight cache-thrashing threads with more cycles must not push
        // the spinning thread (the one an alert is about) off the list.
        let busy = |t: &ThreadSigns| t.symptoms.contains(&Symptom::BusyLoop);
        threads.sort_by(|a, b| {
            busy(b)
                .cmp(&busy(a))
                .then(b.totals.cycles.cmp(&a.totals.cycles))
                .then(a.tid.cmp(&b.tid))
        });
        threads.truncate(MAX_LISTED_THREADS);
        Some(VitalSigns {
            totals,
            rates: SignRates::of(&totals),
            symptoms: symptoms_measured(&totals, &Thresholds::default(), measured),
            threads,
        })
    }

    /// Bytes held (for the engine's state accounting).
    pub fn bytes(&self) -> usize {
        self.epochs.capacity() * std::mem::size_of::<PerfCounters>()
            // A B-tree node holds up to 11 entries; count them as if each paid its
            // share plus the key.
            + self.threads.len() * (std::mem::size_of::<ThreadCounters>() + 8)
    }
}

fn totals_of(p: &PerfCounters, calls: u64, wall_ns: u64) -> CounterTotals {
    CounterTotals {
        calls,
        cycles: p.cycles,
        instructions: p.instructions,
        cache_misses: p.cache_misses,
        context_switches: p.context_switches,
        wall_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn spin(cycles: u64) -> PerfCounters {
        PerfCounters {
            cycles,
            instructions: 2 * cycles,
            cache_misses: cycles / 100_000,
            context_switches: 0,
        }
    }

    #[test]
    fn a_spinning_thread_is_listed_and_an_idle_one_is_not() {
        let mut s = SignsState::default();
        // 20 s of one-second samples: tid 7 burns 3 G cycles a second, tid 8 a few.
        for i in 1..=20u64 {
            assert!(s.add(7, i * S, S, &spin(3 * S), (i / 10) as usize, 9, 10 * S, 100));
            assert!(s.add(8, i * S, S, &spin(1_000), (i / 10) as usize, 9, 10 * S, 100));
        }
        let v = s.report(20 * S, 0, 50, 10 * S, |_, _, _| 5).unwrap();
        assert_eq!(v.threads.len(), 1);
        assert_eq!(v.threads[0].tid, 7);
        assert_eq!(v.threads[0].symptoms, vec![Symptom::BusyLoop]);
        // The span is the older epoch to the end (10–20 s), which holds the samples
        // ending at 10 s to 20 s: 33 G cycles in 10 s.
        assert_eq!(v.threads[0].rates.cycles_per_ns, Some(3.3));
        assert_eq!(v.symptoms, vec![Symptom::BusyLoop]);
        assert_eq!(v.totals.cycles, 20 * 3 * S + 20 * 1_000);
    }

    #[test]
    fn a_thread_sampled_twice_in_a_moment_is_not_a_core_flat_out() {
        let mut s = SignsState::default();
        // Two samples 5 ms apart of a sampled counter (no interval), the report right
        // after: the span starts at the older epoch, not at the samples.
        s.add(1, 5 * S, 0, &spin(1_000), 0, 9, 10 * S, 100);
        s.add(9, 19 * S, 0, &spin(10_000_000), 0, 9, 10 * S, 100);
        s.add(
            9,
            19 * S + 5_000_000,
            0,
            &spin(10_000_000),
            0,
            9,
            10 * S,
            100,
        );
        let v = s
            .report(19 * S + 5_000_000, 0, 0, 10 * S, |_, _, _| 0)
            .unwrap();
        assert!(v.threads.is_empty(), "{v:?}");
    }

    #[test]
    fn threads_past_the_bound_are_refused_until_others_go_stale() {
        let mut s = SignsState::default();
        assert!(s.add(1, S, S, &spin(10), 0, 9, 10 * S, 2));
        assert!(s.add(2, S, S, &spin(10), 0, 9, 10 * S, 2));
        assert!(!s.add(3, 2 * S, S, &spin(10), 0, 9, 10 * S, 2));
        // Two epochs later threads 1 and 2 are stale and make room.
        assert!(s.add(3, 30 * S, S, &spin(10), 3, 9, 10 * S, 2));
        assert!(s.threads.len() <= 2);
        // The refused record still counted for the target.
        assert_eq!(s.epochs[0].cycles, 30);
    }

    #[test]
    fn no_counters_no_vital_signs() {
        let s = SignsState::default();
        assert!(s.report(10 * S, 0, 100, 10 * S, |_, _, _| 0).is_none());
    }

    #[test]
    fn a_cleared_epoch_leaves_the_window() {
        let mut s = SignsState::default();
        s.add(1, S, S, &spin(500), 0, 2, 10 * S, 10);
        s.add(1, 11 * S, S, &spin(700), 1, 2, 10 * S, 10);
        s.clear_epoch(0);
        let v = s.report(12 * S, 0, 0, 10 * S, |_, _, _| 0).unwrap();
        assert_eq!(v.totals.cycles, 700);
        assert_eq!(v.totals.wall_ns, 12 * S);
    }

    #[test]
    fn a_record_stamped_ahead_does_not_silence_its_thread() {
        let mut s = SignsState::default();
        // One record 50 min ahead (inside the clock screen's hour), then the real ones.
        s.add(7, 3_000 * S, S, &spin(10), 0, 9, 10 * S, 100);
        for i in 11..=20u64 {
            s.add(7, i * S, S, &spin(3 * S), 1, 9, 10 * S, 100);
        }
        let v = s.report(20 * S, 0, 0, 10 * S, |_, _, _| 0).unwrap();
        assert_eq!(v.threads.first().map(|t| t.tid), Some(7), "{v:#?}");
    }

    #[test]
    fn a_spinner_is_listed_before_more_cycles_of_cache_thrash() {
        let mut s = SignsState::default();
        // Over the 10 s span: 4 cycles per ns at 50 MPKI, against 3 for the spinner.
        let thrash = PerfCounters {
            cycles: 40 * S,
            instructions: 10 * S,
            cache_misses: 500_000_000,
            context_switches: 0,
        };
        for tid in 1..=MAX_LISTED_THREADS as u32 + 2 {
            s.add(tid, 15 * S, 10 * S, &thrash, 1, 9, 10 * S, 100);
        }
        s.add(99, 15 * S, 10 * S, &spin(30 * S), 1, 9, 10 * S, 100);
        let v = s.report(20 * S, 0, 0, 10 * S, |_, _, _| 0).unwrap();
        assert_eq!(v.threads.len(), MAX_LISTED_THREADS);
        assert_eq!(v.threads[0].tid, 99);
        assert_eq!(v.threads[0].symptoms, vec![Symptom::BusyLoop]);
        assert_eq!(v.threads[1].symptoms, vec![Symptom::CacheThrash]);
    }

    #[test]
    fn counters_gone_for_a_window_give_no_vital_signs() {
        let mut s = SignsState::default();
        s.add(1, S, S, &spin(500), 0, 2, 10 * S, 10);
        s.clear_epoch(1);
        s.clear_epoch(0);
        assert!(s.report(30 * S, 10 * S, 0, 10 * S, |_, _, _| 0).is_none());
    }

    #[test]
    fn a_measured_zero_switch_count_lets_the_syscall_loop_rule_judge() {
        // A thread retrying a failing call: 2 M calls in 1 G cycles, never blocking.
        let retry = PerfCounters {
            cycles: 10 * S,
            instructions: 20 * S,
            cache_misses: 1_000_000,
            context_switches: 0,
        };
        let calls = |_: u32, _: u64, _: u64| 20_000_000;
        let mut unmeasured = SignsState::default();
        unmeasured.add(5, 15 * S, 10 * S, &retry, 1, 9, 10 * S, 100);
        let v = unmeasured.report(20 * S, 0, 0, 10 * S, calls).unwrap();
        assert!(v.threads.is_empty(), "switches are not counted: {v:#?}");
        // Another thread's record counted switches: the source counts them.
        let mut measured = unmeasured.clone();
        let blocking = PerfCounters {
            context_switches: 40,
            ..spin(1_000)
        };
        measured.add(6, 15 * S, 10 * S, &blocking, 1, 9, 10 * S, 100);
        let v = measured.report(20 * S, 0, 0, 10 * S, calls).unwrap();
        assert_eq!(
            v.threads.first().map(|t| (t.tid, t.symptoms.clone())),
            Some((5, vec![Symptom::SyscallLoop]))
        );
    }
}
