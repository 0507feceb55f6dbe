//! The normalized shape every source produces: syscall events grouped by the process that
//! issued them, so the pipeline resolves the target once per batch, not once per event.

use faultline_engine::SyscallEvent;

/// What a source knows about the process behind a batch; the router matches it against
/// the configured targets (by process name, pid, cgroup or OTLP `service.name`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ProcessInfo {
    pub pid: Option<u32>,
    /// Process (command) name, e.g. `mariadbd`.
    pub comm: Option<String>,
    /// OTLP `service.name`, when the events came through OTLP.
    pub service_name: Option<String>,
    pub host: Option<String>,
    /// cgroup path or container id, when known.
    pub cgroup: Option<String>,
}

/// A batch of events of one process, from one source.
#[derive(Clone, Debug, Default)]
pub struct EventBatch {
    /// Source name as used in metric labels (`otlp_grpc`, `otlp_http`, `lttng`, `perf`).
    pub source: &'static str,
    pub process: ProcessInfo,
    pub events: Vec<SyscallEvent>,
}
