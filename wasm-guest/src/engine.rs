//! The engine facade: per-target state, continuous and on-demand evaluation.
//!
//! CONTRACT (shared by the WASM ABI, the plugin host and the tests; do not change the
//! signatures without updating `abi` and `plugin/src/engine_host`).

use crate::event::SyscallEvent;
use crate::params::{ParamError, Params};
use crate::report::{Calibration, EngineCounters, Report};

/// Analyses syscall streams of many targets; all time comes from the events.
#[derive(Debug)]
pub struct Engine {
    params: Params,
    counters: EngineCounters,
}

impl Engine {
    /// An engine whose targets use `params` unless given their own.
    pub fn new(params: Params) -> Result<Self, ParamError> {
        params.validate()?;
        Ok(Self {
            params,
            counters: EngineCounters::default(),
        })
    }

    /// The default parameters every target starts with.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Per-target parameters (e.g. calibrated α/β); applies from the next evaluation.
    pub fn set_target_params(&mut self, _target: &str, params: Params) -> Result<(), ParamError> {
        params.validate()
    }

    /// Feeds a batch of one target's events. Continuous-mode reports that become due
    /// (in event time) are queued for [`Engine::take_reports`].
    pub fn ingest(&mut self, _target: &str, events: &[SyscallEvent]) {
        self.counters.events += events.len() as u64;
    }

    /// On-demand diagnosis: an external alarm says `target` became slow at `at_ns`.
    pub fn trigger(&mut self, _target: &str, _at_ns: u64) -> Option<Report> {
        None
    }

    /// Reports produced since the last call.
    pub fn take_reports(&mut self) -> Vec<Report> {
        Vec::new()
    }

    /// End of stream: evaluates what is pending and returns the final reports.
    pub fn finish(&mut self) -> Vec<Report> {
        Vec::new()
    }

    /// Calibration on a stream recorded under a known external fault starting at
    /// `fault_start_ns` (or the detected onset when `None`).
    pub fn calibrate(
        &mut self,
        _target: &str,
        _fault_start_ns: Option<u64>,
    ) -> Option<Calibration> {
        None
    }

    /// Pairing and bounding counters since start.
    pub fn counters(&self) -> EngineCounters {
        self.counters
    }

    /// Approximate bytes of analysis state held (for the memory bound and benchmarks).
    pub fn state_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
    }
}
