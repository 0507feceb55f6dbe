//! ChopStix-style vital-sign symptoms from aggregated hardware/software counters.
//!
//! PerfCompass says *where* (environment or code, which subsystem); when the source also
//! samples perf counters ([`crate::event::PerfCounters`]), ChopStix's rules (§2.3) say
//! *what kind* of misbehaviour it looks like: a busy loop burns cycles with almost no
//! memory traffic (Rule #1), a tight syscall loop makes calls that never block (Rule #8),
//! and a high cache-miss rate in busy code means memory-bound work or cache thrashing.
//!
//! There is no rule on context switches per call alone: a healthy server's threads block
//! in most of their calls (each `recv` or `epoll_wait` with nothing to read is a switch),
//! so such a rule fires on every idle-ish service (it did on the first healthy stream it
//! met). ChopStix reads its blocking vital against the same process's history instead.
//!
//! Every rule works on ratios, so the same thresholds apply to one thread or to a whole
//! target's totals. Missing counters (zeros) make a rule abstain, never fire.

use serde::{Deserialize, Serialize};

/// Counters summed over a thread or a target for one window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterTotals {
    /// Completed system calls.
    pub calls: u64,
    pub cycles: u64,
    pub instructions: u64,
    pub cache_misses: u64,
    pub context_switches: u64,
    /// Wall-clock length of the window, in ns (the denominator of CPU utilisation).
    pub wall_ns: u64,
}

impl CounterTotals {
    /// Accumulates one call's counters (saturating, so long windows cannot wrap).
    pub fn add_call(&mut self, perf: &crate::event::PerfCounters) {
        self.calls = self.calls.saturating_add(1);
        self.cycles = self.cycles.saturating_add(perf.cycles);
        self.instructions = self.instructions.saturating_add(perf.instructions);
        self.cache_misses = self.cache_misses.saturating_add(perf.cache_misses);
        self.context_switches = self.context_switches.saturating_add(perf.context_switches);
    }
}

/// A recognised misbehaviour pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Symptom {
    /// Many cycles, almost no cache misses, few syscalls: a loop that neither yields nor
    /// touches memory (ChopStix Rule #1).
    BusyLoop,
    /// Syscalls at a very high rate per cycle that almost never block: a loop retrying a
    /// call, such as a failing send (ChopStix Rule #8, PerfCompass fault 5).
    SyscallLoop,
    /// Many cache misses per instruction: memory-bound work or cache thrashing, often a
    /// noisy neighbour sharing the last-level cache.
    CacheThrash,
}

impl Symptom {
    /// The snake_case label for metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Symptom::BusyLoop => "busy_loop",
            Symptom::SyscallLoop => "syscall_loop",
            Symptom::CacheThrash => "cache_thrash",
        }
    }

    /// A short explanation for people.
    pub fn describe(self) -> &'static str {
        match self {
            Symptom::BusyLoop => "busy loop: high CPU with almost no memory traffic or syscalls",
            Symptom::SyscallLoop => {
                "syscall loop: calls repeated at a very high rate without blocking"
            }
            Symptom::CacheThrash => {
                "memory-bound: high cache-miss rate (cache thrash or contention)"
            }
        }
    }
}

/// Thresholds of the rules; [`Thresholds::default`] documents each choice.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    /// Busy loop: at least this many cycles per wall-clock ns (1.0 = one core busy at
    /// 1 GHz for the whole window; CPU utilisation without knowing the clock rate)…
    pub busy_min_cycles_per_ns: f64,
    /// …with fewer cache misses per thousand instructions (MPKI) than this ("near zero")…
    pub busy_max_mpki: f64,
    /// …and fewer syscalls per million cycles than this (the loop does not call the kernel).
    pub busy_max_calls_per_mcycle: f64,
    /// Syscall loop: at least this many calls per million cycles (a call every 50 k
    /// cycles; Apache retrying a failing `openat` made 30–50: a path walk is not cheap)…
    pub loop_min_calls_per_mcycle: f64,
    /// …with fewer context switches per call than this (the calls return at once).
    pub loop_max_switches_per_call: f64,
    /// Cache thrash: at least this MPKI (typical compute stays below ~5)…
    pub thrash_min_mpki: f64,
    /// …in a thread (or target) that keeps at least this many cycles per ns busy. Idle
    /// server threads read 20–90 MPKI (measured: every connection thread of a healthy
    /// MariaDB, at 0.04 cycles per ns: their few cycles go to kernel network paths),
    /// so the rate alone fires on any healthy server; thrashing that matters burns CPU.
    pub thrash_min_cycles_per_ns: f64,
    /// Rules need this many calls (or, for the cycle rules, 1,000× this many cycles) so a
    /// handful of samples cannot fire them.
    pub min_calls: u64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            busy_min_cycles_per_ns: 1.0,
            busy_max_mpki: 0.5,
            busy_max_calls_per_mcycle: 1.0,
            loop_min_calls_per_mcycle: 20.0,
            loop_max_switches_per_call: 0.01,
            thrash_min_mpki: 20.0,
            thrash_min_cycles_per_ns: 0.5,
            min_calls: 100,
        }
    }
}

/// The symptoms the counters show, with the default [`Thresholds`].
pub fn symptoms(c: &CounterTotals) -> Vec<Symptom> {
    symptoms_with(c, &Thresholds::default())
}

/// The symptoms the counters show under explicit thresholds (a switch count of 0 read
/// as not measured: see [`symptoms_measured`]).
pub fn symptoms_with(c: &CounterTotals, t: &Thresholds) -> Vec<Symptom> {
    symptoms_measured(c, t, c.context_switches > 0)
}

/// The symptoms the counters show; `switches_measured`: whether the source counts
/// context switches, so that 0 means none (a loop whose calls never block), not unknown.
pub fn symptoms_measured(
    c: &CounterTotals,
    t: &Thresholds,
    switches_measured: bool,
) -> Vec<Symptom> {
    let mut found = Vec::new();
    let enough_cycles = c.cycles >= t.min_calls.saturating_mul(1000);
    let mpki = ratio(c.cache_misses, c.instructions).map(|r| r * 1000.0);
    let calls_per_mcycle = ratio(c.calls, c.cycles).map(|r| r * 1e6);
    // Without switch counts (perf's sampled counters have none) a rule needing them
    // abstains.
    let switches_per_call = switches_measured
        .then(|| ratio(c.context_switches, c.calls))
        .flatten();
    let cycles_per_ns = ratio(c.cycles, c.wall_ns);

    if enough_cycles
        && cycles_per_ns.is_some_and(|u| u >= t.busy_min_cycles_per_ns)
        && mpki.is_some_and(|m| m < t.busy_max_mpki)
        && calls_per_mcycle.is_some_and(|r| r < t.busy_max_calls_per_mcycle)
    {
        found.push(Symptom::BusyLoop);
    }
    if c.calls >= t.min_calls
        && calls_per_mcycle.is_some_and(|r| r >= t.loop_min_calls_per_mcycle)
        && switches_per_call.is_some_and(|s| s < t.loop_max_switches_per_call)
    {
        found.push(Symptom::SyscallLoop);
    }
    if enough_cycles
        && mpki.is_some_and(|m| m >= t.thrash_min_mpki)
        && cycles_per_ns.is_some_and(|u| u >= t.thrash_min_cycles_per_ns)
    {
        found.push(Symptom::CacheThrash);
    }
    found
}

/// `a / b`, or `None` when the denominator was not measured.
fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn a_spinning_thread_is_a_busy_loop() {
        // 3 G cycles in 1 s (a 3 GHz core flat out), 1 miss per 10 k instructions, 10 calls.
        let c = CounterTotals {
            calls: 10,
            cycles: 3 * SECOND,
            instructions: 6 * SECOND,
            cache_misses: 600_000,
            context_switches: 1,
            wall_ns: SECOND,
        };
        assert_eq!(symptoms(&c), vec![Symptom::BusyLoop]);
    }

    #[test]
    fn a_failing_call_retried_in_a_loop_is_a_syscall_loop() {
        // 2 M calls in 1 G cycles (one per 500 cycles), none of them blocking.
        let c = CounterTotals {
            calls: 2_000_000,
            cycles: SECOND,
            instructions: 2 * SECOND,
            cache_misses: 100_000,
            context_switches: 3,
            wall_ns: SECOND,
        };
        assert_eq!(symptoms(&c), vec![Symptom::SyscallLoop]);
    }

    #[test]
    fn many_misses_per_instruction_is_cache_thrash() {
        let c = CounterTotals {
            calls: 1_000,
            cycles: 2 * SECOND,
            instructions: SECOND,
            cache_misses: 40_000_000, // 40 MPKI
            context_switches: 10,
            wall_ns: SECOND,
        };
        assert_eq!(symptoms(&c), vec![Symptom::CacheThrash]);
    }

    #[test]
    fn healthy_or_unmeasured_counters_show_nothing() {
        assert!(symptoms(&CounterTotals::default()).is_empty());
        // Calls without any perf counters: every ratio is undefined.
        let calls_only = CounterTotals {
            calls: 1_000_000,
            wall_ns: SECOND,
            ..CounterTotals::default()
        };
        assert!(symptoms(&calls_only).is_empty());
        // A moderately loaded server: half a core, 3 MPKI, a call per 50 k cycles, 10 % blocking.
        let healthy = CounterTotals {
            calls: 10_000,
            cycles: 500_000_000,
            instructions: 800_000_000,
            cache_misses: 2_400_000,
            context_switches: 1_000,
            wall_ns: SECOND,
        };
        assert!(symptoms(&healthy).is_empty());
        // An idle server thread: 80 MPKI (kernel network paths) at 0.04 cycles per ns,
        // as every connection thread of a healthy MariaDB read: not thrashing.
        let idle = CounterTotals {
            calls: 9_000,
            cycles: 400_000_000,
            instructions: 200_000_000,
            cache_misses: 16_000_000,
            context_switches: 4_000,
            wall_ns: 10 * SECOND,
        };
        assert!(symptoms(&idle).is_empty());
        // Too few samples to judge, however extreme the ratios.
        let tiny = CounterTotals {
            calls: 5,
            cycles: 5_000,
            instructions: 5_000,
            cache_misses: 1_000,
            context_switches: 5,
            wall_ns: 1_000,
        };
        assert!(symptoms(&tiny).is_empty());
    }

    #[test]
    fn thresholds_are_configurable() {
        // 15 MPKI: below the default 20, above a stricter 10.
        let c = CounterTotals {
            calls: 10_000,
            cycles: 2 * SECOND,
            instructions: SECOND,
            cache_misses: 15_000_000,
            context_switches: 3_000,
            wall_ns: SECOND,
        };
        assert!(symptoms(&c).is_empty());
        let strict = Thresholds {
            thrash_min_mpki: 10.0,
            ..Thresholds::default()
        };
        assert_eq!(symptoms_with(&c, &strict), vec![Symptom::CacheThrash]);
    }

    #[test]
    fn totals_accumulate_per_call_counters() {
        let mut t = CounterTotals::default();
        let perf = crate::event::PerfCounters {
            cycles: 10,
            instructions: 20,
            cache_misses: 1,
            context_switches: 1,
        };
        t.add_call(&perf);
        t.add_call(&perf);
        assert_eq!(
            (
                t.calls,
                t.cycles,
                t.instructions,
                t.cache_misses,
                t.context_switches
            ),
            (2, 20, 40, 2, 2)
        );
        assert!(Symptom::BusyLoop.describe().contains("busy loop"));
        assert_eq!(Symptom::CacheThrash.as_str(), "cache_thrash");
    }
}
