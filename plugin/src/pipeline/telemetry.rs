//! Counters every component bumps so nothing is lost silently; the Prometheus and OTLP
//! sinks read them. Lock-free atomics because sources bump them per event on hot paths.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Why an event was dropped (a closed set, so metric label values stay bounded).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The bounded queue towards the engine was full.
    QueueFull,
    /// A request or record exceeded the configured size limit.
    TooLarge,
    /// No configured target matched the process.
    NoTarget,
    /// A series or label cap was reached.
    Capped,
    /// A record that carried no syscall (other telemetry sent to an OTLP endpoint).
    NotSyscall,
    /// Lost before faultline saw it: the kernel ring buffer overflowed (perf's
    /// `PERF_RECORD_LOST`, LTTng's discarded events as babeltrace2 reports them), so the
    /// tracer itself reports how many events never arrived.
    KernelLost,
    /// The engine failed on the batch (a WASM guest trapped and was restarted, or
    /// rejected it): its events were not analysed.
    EngineError,
}

impl DropReason {
    pub const ALL: [DropReason; 7] = [
        DropReason::QueueFull,
        DropReason::TooLarge,
        DropReason::NoTarget,
        DropReason::Capped,
        DropReason::NotSyscall,
        DropReason::KernelLost,
        DropReason::EngineError,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::QueueFull => "queue_full",
            DropReason::TooLarge => "too_large",
            DropReason::NoTarget => "no_target",
            DropReason::Capped => "capped",
            DropReason::NotSyscall => "not_syscall",
            DropReason::KernelLost => "kernel_lost",
            DropReason::EngineError => "engine_error",
        }
    }
}

/// Counters of one source.
#[derive(Debug)]
pub struct SourceStats {
    pub name: &'static str,
    received: AtomicU64,
    decode_errors: AtomicU64,
    dropped: [AtomicU64; DropReason::ALL.len()],
}

impl SourceStats {
    pub fn new(name: &'static str) -> Self {
        Self {
            name,
            received: AtomicU64::new(0),
            decode_errors: AtomicU64::new(0),
            dropped: Default::default(),
        }
    }
    pub fn add_received(&self, n: u64) {
        self.received.fetch_add(n, Ordering::Relaxed);
    }
    pub fn add_decode_errors(&self, n: u64) {
        self.decode_errors.fetch_add(n, Ordering::Relaxed);
    }
    pub fn add_dropped(&self, reason: DropReason, n: u64) {
        self.dropped[reason as usize].fetch_add(n, Ordering::Relaxed);
    }
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }
    pub fn decode_errors(&self) -> u64 {
        self.decode_errors.load(Ordering::Relaxed)
    }
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.dropped[reason as usize].load(Ordering::Relaxed)
    }
}

/// Process-wide registry of component counters, shared by `Arc`.
#[derive(Debug, Default)]
pub struct Telemetry {
    sources: Mutex<Vec<Arc<SourceStats>>>,
    guest_restarts: AtomicU64,
    guest_traps: AtomicU64,
}

impl Telemetry {
    /// The counters of source `name`, created on first use.
    pub fn source(&self, name: &'static str) -> Arc<SourceStats> {
        let mut v = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = v.iter().find(|s| s.name == name) {
            return s.clone();
        }
        let s = Arc::new(SourceStats::new(name));
        v.push(s.clone());
        s
    }
    /// A snapshot of all sources' counters.
    pub fn sources(&self) -> Vec<Arc<SourceStats>> {
        self.sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
    pub fn add_guest_restart(&self) {
        self.guest_restarts.fetch_add(1, Ordering::Relaxed);
    }
    pub fn add_guest_trap(&self) {
        self.guest_traps.fetch_add(1, Ordering::Relaxed);
    }
    pub fn guest_restarts(&self) -> u64 {
        self.guest_restarts.load(Ordering::Relaxed)
    }
    pub fn guest_traps(&self) -> u64 {
        self.guest_traps.load(Ordering::Relaxed)
    }
}
