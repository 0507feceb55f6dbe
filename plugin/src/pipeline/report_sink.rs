//! What the engine task hands its results to. Sinks are called synchronously from the
//! engine thread, so each must be cheap (update in-memory state, write one line) and
//! leave anything slow (network pushes) to its own task.

use faultline_engine::report::EngineCounters;
use faultline_engine::Report;

/// A sink failed to publish; logged and counted, never fatal for the pipeline.
#[derive(Debug, thiserror::Error)]
#[error("sink `{sink}`: {message}")]
pub struct SinkError {
    pub sink: &'static str,
    pub message: String,
}

/// A consumer of reports and engine activity.
pub trait ReportSink: Send {
    /// Name for logs.
    fn name(&self) -> &'static str;
    /// A new report (continuous, on-demand or final).
    fn publish(&mut self, report: &Report) -> Result<(), SinkError>;
    /// Make everything published so far durable/visible (called at shutdown and when idle).
    fn flush(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
    /// Wall-clock seconds one engine call took (for the analysis-duration histogram).
    fn observe_engine_call(&mut self, _seconds: f64) {}
    /// The engine's counters after a call.
    fn observe_engine_counters(&mut self, _counters: &EngineCounters) {}
    /// Drops what the sink keeps of `target`: the router evicted it (an idle discovered
    /// name), so its series must stop being exported and free their place under the cap.
    fn forget(&mut self, _target: &str) {}
}
