//! Engine hosting: the analysis engine in a wasmtime sandbox (default) or linked natively.
//!
//! The sandbox is why the plugin can run inside someone else's agent: a bug in the
//! analysis becomes a counted, logged trap and a restarted guest instead of a crashed
//! collector, and the engine's memory and CPU per call are capped. Native hosting exists
//! for maximum throughput and for builds without wasmtime.
//!
//! Both hosts implement [`EngineHost`], a synchronous, fallible mirror of
//! [`faultline_engine::Engine`]; the pipeline calls it from a blocking task.

#[cfg(feature = "wasm")]
mod bulk_memory_lowering;
#[cfg(feature = "wasm")]
mod call_fence;
mod config;
#[cfg(feature = "wasm")]
mod guest_imports;
mod heap_huge_pages;
mod huge_pages;
pub mod memory_fit;
mod native;
#[cfg(feature = "wasm")]
mod restart_backoff;
#[cfg(feature = "wasm")]
mod wasm;

use std::sync::Arc;

use faultline_engine::report::{Calibration, EngineCounters};
use faultline_engine::{ParamError, Params, Report, Stillness, SyscallEvent};
use thiserror::Error;

use crate::pipeline::telemetry::{DropReason, Telemetry};

pub use config::{
    EngineKind, HostConfig, HostConfigError, TimeoutMechanism, MAX_MEMORY_LIMIT_BYTES,
    MIN_MEMORY_LIMIT_BYTES,
};
pub use huge_pages::HugePageStats;
pub use native::NativeHost;
#[cfg(feature = "wasm")]
pub use wasm::{WasmHost, GUEST_WASM, PERFMAP_ENV};

/// Why an engine call failed; the caller counts the batch or report as lost and goes on.
#[derive(Debug, Error)]
pub enum HostError {
    /// Parameters were rejected (at start or for one target).
    #[error(transparent)]
    Params(#[from] ParamError),
    /// The host configuration is unusable.
    #[error(transparent)]
    Config(#[from] HostConfigError),
    /// The guest trapped (bug, CPU budget or memory limit); it was restarted (or, if that
    /// failed, is retried with a backoff), every target's state lost.
    #[error("engine guest trapped in `{call}` (every target's state is lost; restarted, or retried after a backoff): {message}")]
    Trap { call: &'static str, message: String },
    /// The guest returned an error status (a malformed batch, bad parameters).
    #[error("engine guest call `{call}` failed ({status}): {message}")]
    Guest {
        call: &'static str,
        status: &'static str,
        message: String,
    },
    /// The WASM module could not be compiled, instantiated or does not speak our ABI; or,
    /// after a failed restart, no guest runs until the next attempt.
    #[error("engine guest unavailable: {0}")]
    Unavailable(String),
    /// A batch could not be encoded for the guest (e.g. a target name over 64 KiB).
    #[error("cannot encode the batch for the engine guest: {0}")]
    Encode(String),
    /// The guest's JSON answer did not parse (a host/guest version mismatch).
    #[error("cannot decode the engine guest's answer to `{call}`: {message}")]
    Decode { call: &'static str, message: String },
}

/// Why the events of a batch an engine error lost were not analysed: a missing guest is
/// told apart from a failed call, because every batch is lost until it is back.
impl From<&HostError> for DropReason {
    fn from(e: &HostError) -> Self {
        match e {
            HostError::Unavailable(_) => DropReason::EngineUnavailable,
            _ => DropReason::EngineError,
        }
    }
}

/// The engine operations the pipeline drives, whichever way the engine is hosted.
///
/// Mirrors [`faultline_engine::Engine`], but every call may fail: a WASM guest can trap.
pub trait EngineHost: Send {
    /// Which hosting this is (for logs and metrics).
    fn kind(&self) -> EngineKind;
    /// Per-target parameters (e.g. calibrated α/β); kept across guest restarts.
    fn set_target_params(&mut self, target: &str, params: Params) -> Result<(), HostError>;
    /// Drops `target`'s own parameters (and forgets them for restarts): the router evicted
    /// another host's target of a configured one, whose slot under `max_targets` the
    /// parameters also hold.
    fn clear_target_params(&mut self, target: &str) -> Result<(), HostError>;
    /// Feeds one target's events.
    fn ingest(&mut self, target: &str, events: &[SyscallEvent]) -> Result<(), HostError>;
    /// On-demand diagnosis: `target` became slow at `at_ns` (event clock).
    fn trigger(&mut self, target: &str, at_ns: u64) -> Result<Option<Report>, HostError>;
    /// Moves a silent target's clock to `now_ns` (event clock); the cadence reports that
    /// became due wait for [`EngineHost::take_reports`]. `still`: what the host saw of
    /// the target's processes.
    fn advance(&mut self, target: &str, now_ns: u64, still: Stillness) -> Result<(), HostError>;
    /// Drops `target`'s analysis state and pending reports (not its own parameters): the
    /// router evicted it, and its slot under `max_targets` goes to a new target.
    fn forget(&mut self, target: &str) -> Result<(), HostError>;
    /// Continuous-mode reports that became due.
    fn take_reports(&mut self) -> Result<Vec<Report>, HostError>;
    /// End of stream: the final reports.
    fn finish(&mut self) -> Result<Vec<Report>, HostError>;
    /// α/β from a stream recorded under a known external fault.
    fn calibrate(
        &mut self,
        target: &str,
        fault_start_ns: Option<u64>,
    ) -> Result<Option<Calibration>, HostError>;
    /// Pairing and bounding counters since the engine (or the current guest) started.
    fn counters(&mut self) -> Result<EngineCounters, HostError>;
    /// Approximate bytes of analysis state held.
    fn state_bytes(&mut self) -> Result<usize, HostError>;
}

/// The host `config` asks for, with default parameters `params`.
///
/// Guest traps and restarts are counted in `telemetry`.
pub fn build_host(
    config: &HostConfig,
    params: Params,
    telemetry: Arc<Telemetry>,
) -> Result<Box<dyn EngineHost>, HostError> {
    config.validate()?;
    match config.kind {
        EngineKind::Native => Ok(Box::new(NativeHost::new(params, config.huge_pages)?)),
        #[cfg(feature = "wasm")]
        EngineKind::Wasm => Ok(Box::new(WasmHost::new(config, params, telemetry)?)),
        #[cfg(not(feature = "wasm"))]
        EngineKind::Wasm => {
            let _ = telemetry;
            Err(HostError::Unavailable(
                "this build has no WASM support (feature `wasm`); set [engine] kind = \"native\""
                    .into(),
            ))
        }
    }
}
