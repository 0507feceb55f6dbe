//! The engine facade: per-target state, continuous and on-demand evaluation.
//!
//! CONTRACT (shared by the WASM ABI, the plugin host and the tests; do not change the
//! signatures without updating `abi` and `plugin/src/engine_host`).
//!
//! Each target is analysed independently ([`crate::target::Target`]); the engine only
//! routes batches (one target lookup per batch), bounds the number of targets (extra
//! targets' batches are dropped and counted in `dropped_targets`), restores per-batch
//! time order, and collects the reports that become due.
//!
//! Pipeline per target: [`crate::pairing`] (enter/exit → calls) → [`crate::thread`]
//! (execution units split on gaps > `gap_threshold`, k-moving averages per syscall of
//! execution time, frequency and the off-CPU gap) → [`crate::detector`] (baselines
//! learned from earlier clean epochs, outlier = above mean + Θσ *and* the baseline's
//! maximum, confirmed by repeated or sustained exceedance) → [`crate::diagnosis`] (T0,
//! σ, τ, Ω, Fig. 3 verdict with filtering mode) and [`crate::ranking`].
//!
//! Modes: continuous (`ingest` emits one report per target per cadence tick in event
//! time, T0 detected), on demand (`trigger(target, T)`: T0 = T, the paper's setting),
//! end of stream (`finish`) and calibration (`calibrate`: α = largest σ of the busy threads, never below the
//! configured α; β = their dispersion).

use std::collections::HashMap;

use crate::event::{EventKind, SyscallEvent};
use crate::params::{ParamError, Params};
use crate::report::{Calibration, EngineCounters, Report};
use crate::stillness::Stillness;
use crate::target::Target;

/// Sort scratch above this many events is released after a batch, as the guest does
/// with its decode buffer.
const SCRATCH_KEEP_EVENTS: usize = 1 << 16;

/// Analyses syscall streams of many targets; all time comes from the events.
#[derive(Debug)]
pub struct Engine {
    params: Params,
    counters: EngineCounters,
    targets: HashMap<String, Target>,
    overrides: HashMap<String, Params>,
    pending: Vec<Report>,
    /// Reused buffer for batches that arrive out of time order.
    scratch: Vec<SyscallEvent>,
}

impl Engine {
    /// An engine whose targets use `params` unless given their own.
    pub fn new(params: Params) -> Result<Self, ParamError> {
        params.validate()?;
        Ok(Self {
            params,
            counters: EngineCounters::default(),
            targets: HashMap::new(),
            overrides: HashMap::new(),
            pending: Vec::new(),
            scratch: Vec::new(),
        })
    }

    /// The default parameters every target starts with.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Per-target parameters (e.g. calibrated α/β); applies from the next evaluation.
    pub fn set_target_params(&mut self, target: &str, params: Params) -> Result<(), ParamError> {
        params.validate()?;
        // Refused, not dropped: a calibration the operator stored must not silently
        // give way to the defaults.
        if self.overrides.len() >= self.params.max_targets && !self.overrides.contains_key(target) {
            return Err(ParamError {
                key: "max_targets",
                reason: format!(
                    "per-target parameters are capped at max_targets = {}",
                    self.params.max_targets
                ),
            });
        }
        if let Some(t) = self.targets.get_mut(target) {
            t.set_params(params.clone());
        }
        self.overrides.insert(target.to_string(), params);
        Ok(())
    }

    /// Drops `target`'s own parameters: it (or a later target of that name) runs on the
    /// engine's again. Frees the slot [`Engine::set_target_params`] caps at `max_targets`,
    /// for hosts whose per-target parameters go with targets they evict.
    pub fn clear_target_params(&mut self, target: &str) {
        if self.overrides.remove(target).is_some() {
            if let Some(t) = self.targets.get_mut(target) {
                t.set_params(self.params.clone());
            }
        }
    }

    /// Feeds a batch of one target's events. Continuous-mode reports that become due
    /// (in event time) are queued for [`Engine::take_reports`].
    pub fn ingest(&mut self, target: &str, events: &[SyscallEvent]) {
        self.counters.events += events.len() as u64;
        if events.is_empty() {
            return;
        }
        if !self.targets.contains_key(target) {
            // A process that makes no call is no target: the TCP sampler reads a
            // namespace for every process name in it (counted, not kept).
            if events.iter().all(|e| e.kind == EventKind::TcpSegments) {
                self.counters.untargeted_segment_records += events.len() as u64;
                return;
            }
            if self.targets.len() >= self.params.max_targets {
                self.counters.dropped_targets += 1;
                return;
            }
            let p = self
                .overrides
                .get(target)
                .cloned()
                .unwrap_or_else(|| self.params.clone());
            self.targets
                .insert(target.to_string(), Target::new(target, p));
        }
        let Some(t) = self.targets.get_mut(target) else {
            return;
        };
        // Restore time order inside the batch (sources may interleave CPUs); reordering
        // across batches is handled (and counted) per thread by the pairing.
        let sorted = events.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns);
        let reports = if sorted {
            t.ingest(events, &mut self.counters)
        } else {
            self.scratch.clear();
            self.scratch.extend_from_slice(events);
            self.scratch.sort_by_key(|e| e.ts_ns);
            let reports = t.ingest(&self.scratch, &mut self.counters);
            // One huge unsorted batch must not pin its copy for the engine's life.
            self.scratch.clear();
            self.scratch.shrink_to(SCRATCH_KEEP_EVENTS);
            reports
        };
        self.pending.extend(reports);
    }

    /// Moves `target`'s clock to `now_ns` when its source sent nothing for a while (the
    /// host's estimate of the source clock): the cadence reports that become due are
    /// queued for [`Engine::take_reports`]. A target whose threads all stopped makes no
    /// record, and the engine's time comes only from records. Unknown targets, and times
    /// not ahead of the target's clock, are ignored. `still`: what the host saw of the
    /// target's processes (see [`Stillness`]), until a record at or past the moved clock.
    pub fn advance(&mut self, target: &str, now_ns: u64, still: Stillness) {
        if let Some(t) = self.targets.get_mut(target) {
            let due = t.advance(now_ns, still, &mut self.counters);
            self.pending.extend(due);
        }
    }

    /// Drops `target`'s analysis state and its pending reports, so a target the host no
    /// longer routes (an idle discovered name evicted for a new one) frees its slot under
    /// `max_targets`; its per-target parameters stay, since the operator set them. A
    /// later batch of the same name starts it afresh. False when it was not known.
    pub fn forget(&mut self, target: &str) -> bool {
        self.pending.retain(|r| r.target != target);
        self.targets.remove(target).is_some()
    }

    /// On-demand diagnosis: an external alarm says `target` became slow at `at_ns`.
    pub fn trigger(&mut self, target: &str, at_ns: u64) -> Option<Report> {
        let t = self.targets.get_mut(target)?;
        // The alarm's time confirms records held for a leap up to it (see `LeapHold`).
        let due = t.confirm_held(at_ns, &mut self.counters);
        self.pending.extend(due);
        Some(t.trigger(at_ns, &self.counters))
    }

    /// Reports produced since the last call.
    pub fn take_reports(&mut self) -> Vec<Report> {
        std::mem::take(&mut self.pending)
    }

    /// End of stream: evaluates what is pending and returns the final reports.
    pub fn finish(&mut self) -> Vec<Report> {
        let mut out = std::mem::take(&mut self.pending);
        for t in self.targets.values_mut() {
            t.drop_held(&mut self.counters);
        }
        let mut names: Vec<&String> = self.targets.keys().collect();
        names.sort();
        for n in names {
            if let Some(t) = self.targets.get(n) {
                out.push(t.finish(&self.counters));
            }
        }
        out
    }

    /// Calibration on a stream recorded under a known external fault starting at
    /// `fault_start_ns` (or the detected onset when `None`).
    pub fn calibrate(&mut self, target: &str, fault_start_ns: Option<u64>) -> Option<Calibration> {
        let t = self.targets.get_mut(target)?;
        if let Some(at) = fault_start_ns {
            let due = t.confirm_held(at, &mut self.counters);
            self.pending.extend(due);
        }
        t.calibrate(fault_start_ns, &self.counters)
    }

    /// Pairing and bounding counters since start.
    pub fn counters(&self) -> EngineCounters {
        self.counters
    }

    /// Approximate bytes of analysis state held (for the memory bound and benchmarks).
    pub fn state_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self
                .targets
                .values()
                .map(|t| t.bytes() + t.name.capacity())
                .sum::<usize>()
            + self.targets.capacity() * std::mem::size_of::<(String, Target)>()
            + self.overrides.capacity() * std::mem::size_of::<(String, Params)>()
            + self.scratch.capacity() * std::mem::size_of::<SyscallEvent>()
            + self.pending.capacity() * std::mem::size_of::<Report>()
    }

    /// Threads tracked for `target` (for tests and benchmarks of the memory bound).
    pub fn thread_count(&self, target: &str) -> usize {
        self.targets.get(target).map_or(0, Target::thread_count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syscalls::SyscallId;

    const SECOND: u64 = 1_000_000_000;

    /// `threads` threads' `read`s every 10 ms over `[from_s, to_s)`.
    fn reads(threads: u32, from_s: u64, to_s: u64) -> Vec<SyscallEvent> {
        let read = SyscallId::from_name("read");
        (from_s * 100..to_s * 100)
            .flat_map(|i| {
                (1..=threads)
                    .map(move |tid| SyscallEvent::complete(7, tid, read, i * SECOND / 100, 20_000))
            })
            .collect()
    }

    #[test]
    fn a_forgotten_target_frees_its_state_and_slot_and_restarts_afresh() {
        let params = Params {
            max_targets: 2,
            ..Params::default()
        };
        let mut e = Engine::new(params.clone()).expect("valid params");
        let own = Params {
            cadence_seconds: params.cadence_seconds * 2.0,
            ..params.clone()
        };
        e.set_target_params("helper", own.clone())
            .expect("valid params");
        e.ingest("svc", &reads(1, 0, 30));
        // Long enough for cadence reports of the helper to be pending.
        e.ingest("helper", &reads(4, 0, 30));
        assert_eq!(e.thread_count("helper"), 4);
        let before = e.state_bytes();

        assert!(e.forget("helper"));
        assert_eq!(e.thread_count("helper"), 0);
        assert!(e.state_bytes() < before, "{} < {before}", e.state_bytes());
        assert!(e.take_reports().iter().all(|r| r.target != "helper"));
        assert!(!e.forget("helper"), "already forgotten");
        assert_eq!(e.thread_count("svc"), 1, "other targets are kept");

        // Its slot is free again: a third name fits under max_targets = 2.
        e.ingest("new", &reads(1, 30, 31));
        assert_eq!(e.thread_count("new"), 1);
        assert_eq!(e.counters().dropped_targets, 0);
        assert!(e.forget("new"));
        // A batch of the forgotten name starts it afresh, with the operator's parameters.
        e.ingest("helper", &reads(1, 30, 31));
        assert_eq!(e.thread_count("helper"), 1);
        assert_eq!(
            e.targets.get("helper").map(|t| t.params().clone()),
            Some(own)
        );
    }

    #[test]
    fn forgetting_drops_the_targets_pending_reports() {
        let mut e = Engine::new(Params::default()).expect("valid params");
        e.ingest("svc", &reads(1, 0, 60));
        e.ingest("helper", &reads(1, 0, 60));
        assert!(
            e.pending.iter().any(|r| r.target == "helper"),
            "a report is due"
        );
        e.forget("helper");
        assert!(e.pending.iter().all(|r| r.target != "helper"));
        assert!(e.pending.iter().any(|r| r.target == "svc"));
    }
}
