//! Counters every component bumps so nothing is lost silently; the Prometheus and OTLP
//! sinks read them. Lock-free atomics because sources bump them per event on hot paths.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

/// Why an event was dropped (a closed set, so metric label values stay bounded).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The bounded queue towards the engine was full.
    QueueFull,
    /// A request or record exceeded the configured size limit.
    TooLarge,
    /// A whole request that did not decode (malformed protobuf, JSON, gzip or gRPC frame):
    /// one per request, its events being unknown, like `TooLarge`. Not a decode error,
    /// which counts records: as a share of the events received one per request reads as
    /// nothing, and one sender's broken requests among others' good ones went unseen.
    Malformed,
    /// No configured target matched the process.
    NoTarget,
    /// Discovery (no `[[targets]]` configured) already tracks `analysis.max_targets`
    /// names and none has been idle for 10 min to give up its slot to a new one. The
    /// cure is a larger `[analysis] max_targets`, or `[[targets]]`; the sinks' series
    /// caps never drop events (they count in `faultline_series_capped_total`).
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
    /// The engine had no WASM guest to take the batch: re-instantiating it after a trap
    /// failed, and the next attempt waits out its backoff. Apart from `engine_error`
    /// because the cure differs: every batch is lost until a restart succeeds.
    EngineUnavailable,
    /// The target is quarantined: its own calls trapped the WASM guest again and again
    /// (see `pipeline::quarantine`), and its batches are set aside for a while so that the
    /// other targets keep their analysis state.
    Quarantined,
}

impl DropReason {
    pub const ALL: [DropReason; 10] = [
        DropReason::QueueFull,
        DropReason::TooLarge,
        DropReason::Malformed,
        DropReason::NoTarget,
        DropReason::Capped,
        DropReason::NotSyscall,
        DropReason::KernelLost,
        DropReason::EngineError,
        DropReason::EngineUnavailable,
        DropReason::Quarantined,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::QueueFull => "queue_full",
            DropReason::TooLarge => "too_large",
            DropReason::Malformed => "malformed",
            DropReason::NoTarget => "no_target",
            DropReason::Capped => "capped",
            DropReason::NotSyscall => "not_syscall",
            DropReason::KernelLost => "kernel_lost",
            DropReason::EngineError => "engine_error",
            DropReason::EngineUnavailable => "engine_unavailable",
            DropReason::Quarantined => "quarantined",
        }
    }
}

/// Why a WASM guest call trapped (a closed set: the `reason` label of
/// `faultline_guest_traps_total`), because each has its own cure: more memory, a longer
/// budget, or a bug report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TrapReason {
    /// Growing the guest's memory past `[engine] memory_limit_bytes` was refused.
    MemoryLimit,
    /// The call ran past `[engine] call_timeout_ms` (memory fence or epoch deadline).
    Timeout,
    /// The call used up `[engine] fuel_per_call`.
    Fuel,
    /// Anything else: an engine bug (a panic, an out-of-bounds access), or an error of
    /// wasmtime itself.
    Other,
}

impl TrapReason {
    pub const ALL: [TrapReason; 4] = [
        TrapReason::MemoryLimit,
        TrapReason::Timeout,
        TrapReason::Fuel,
        TrapReason::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TrapReason::MemoryLimit => "memory_limit",
            TrapReason::Timeout => "timeout",
            TrapReason::Fuel => "fuel",
            TrapReason::Other => "other",
        }
    }
}

/// The WASM guest as its gauges show it (`faultline_guest_up`,
/// `faultline_guest_memory_bytes`, `faultline_guest_memory_limit_bytes`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GuestGauges {
    /// A guest instance is live (false while a failed restart backs off).
    pub up: bool,
    /// Bytes of the live guest's linear memory (0 without one).
    pub memory_bytes: u64,
    /// `[engine] memory_limit_bytes`.
    pub memory_limit_bytes: u64,
}

/// [`GuestGauges`] as atomics, written by the engine thread after every guest call.
#[derive(Debug, Default)]
struct GuestCells {
    /// The WASM host that owns the gauges, 0 for none: a native engine (or none yet)
    /// exports no guest gauges, and a host that goes clears only its own.
    owner: AtomicU64,
    up: AtomicBool,
    memory_bytes: AtomicU64,
    memory_limit_bytes: AtomicU64,
}

/// Where a live capture's reading loop is: a capture that ends while faultline runs
/// leaves its targets unwatched, which `/healthz` and `faultline_source_up` must show (the
/// log line alone was easy to miss). Files (replay, a recorded LTTng trace) have none:
/// their end is normal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum SourceRun {
    /// Reading.
    Running,
    /// Its input ended on its own (the traced process exited, the tool quit).
    Ended,
    /// Its input failed (the error is in the log).
    Failed,
    /// Stopped by faultline's own shutdown.
    Stopped,
}

impl SourceRun {
    const ALL: [SourceRun; 4] = [
        SourceRun::Running,
        SourceRun::Ended,
        SourceRun::Failed,
        SourceRun::Stopped,
    ];
}

/// The run state of one live capture.
#[derive(Debug)]
pub struct LiveSource {
    pub name: &'static str,
    /// A [`SourceRun`] as its index.
    run: AtomicU8,
}

impl LiveSource {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            run: AtomicU8::new(SourceRun::Running as u8),
        }
    }
    /// The reading loop is over, for `why`. A stop already recorded stays: the capture's
    /// end is then the stop's doing, whatever the tool died of.
    pub fn set_run(&self, why: SourceRun) {
        let _ = self
            .run
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
                (now != SourceRun::Stopped as u8).then_some(why as u8)
            });
    }
    pub fn run(&self) -> SourceRun {
        let i = self.run.load(Ordering::Relaxed) as usize;
        SourceRun::ALL.get(i).copied().unwrap_or(SourceRun::Running)
    }
    /// No longer reading although nobody stopped it.
    pub fn is_down(&self) -> bool {
        matches!(self.run(), SourceRun::Ended | SourceRun::Failed)
    }
}

/// Counters of one source.
#[derive(Debug)]
pub struct SourceStats {
    pub name: &'static str,
    received: AtomicU64,
    decode_errors: AtomicU64,
    dropped: [AtomicU64; DropReason::ALL.len()],
    segments: SegmentTallies,
}

/// What became of the TCP segment metric points an OTLP receiver read (see
/// `sources::otlp::segment_metrics`): a reading that loses a half, or a cadence too
/// sparse for the packet-loss test, costs that test its samples and nothing else shows it.
#[derive(Debug, Default)]
pub struct SegmentTallies {
    /// Set by a receiver that reads segment metrics: only those export the tallies (from
    /// 0, so a rate alert has a series before the first loss).
    watched: AtomicBool,
    points: AtomicU64,
    unpaired: AtomicU64,
    gaps: AtomicU64,
    forgotten: AtomicU64,
}

/// One request's worth of [`SegmentTallies`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SegmentCounts {
    /// Metric points taken (each half of a reading counts).
    pub points: u64,
    /// Of those, halves whose other half never came: that sample is lost.
    pub unpaired: u64,
    /// Readings taken as a new reference after a gap too long for one record.
    pub gaps: u64,
    /// Series forgotten to keep the receiver's series bounded.
    pub forgotten: u64,
}

impl SegmentTallies {
    /// Marks the source as one that reads segment metrics.
    pub fn watch(&self) {
        self.watched.store(true, Ordering::Relaxed);
    }
    pub fn is_watched(&self) -> bool {
        self.watched.load(Ordering::Relaxed)
    }
    pub fn add(&self, n: SegmentCounts) {
        for (c, v) in [
            (&self.points, n.points),
            (&self.unpaired, n.unpaired),
            (&self.gaps, n.gaps),
            (&self.forgotten, n.forgotten),
        ] {
            c.fetch_add(v, Ordering::Relaxed);
        }
    }
    /// The totals so far.
    pub fn get(&self) -> SegmentCounts {
        SegmentCounts {
            points: self.points.load(Ordering::Relaxed),
            unpaired: self.unpaired.load(Ordering::Relaxed),
            gaps: self.gaps.load(Ordering::Relaxed),
            forgotten: self.forgotten.load(Ordering::Relaxed),
        }
    }
}

impl SourceStats {
    pub fn new(name: &'static str) -> Self {
        Self {
            name,
            received: AtomicU64::new(0),
            decode_errors: AtomicU64::new(0),
            dropped: Default::default(),
            segments: SegmentTallies::default(),
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
    /// The TCP segment metric tallies (OTLP receivers only).
    pub fn segments(&self) -> &SegmentTallies {
        &self.segments
    }
}

/// Which OTLP signal the push sink exported (the `signal` label of its failures).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OtlpSignal {
    Metrics,
    Logs,
}

impl OtlpSignal {
    pub const ALL: [OtlpSignal; 2] = [OtlpSignal::Metrics, OtlpSignal::Logs];

    pub fn as_str(self) -> &'static str {
        match self {
            OtlpSignal::Metrics => "metrics",
            OtlpSignal::Logs => "logs",
        }
    }
}

/// Process-wide registry of component counters, shared by `Arc`.
#[derive(Debug, Default)]
pub struct Telemetry {
    sources: Mutex<Vec<Arc<SourceStats>>>,
    guest_restarts: AtomicU64,
    /// Re-instantiations of the guest that failed (each then backs off).
    guest_restart_failures: AtomicU64,
    /// Traps by [`TrapReason`].
    guest_traps: [AtomicU64; TrapReason::ALL.len()],
    guest: GuestCells,
    /// Failed exports of the OTLP push sink, by [`OtlpSignal`].
    otlp_export_failures: [AtomicU64; 2],
    /// Verdict records of the OTLP push sink waiting for the collector (see
    /// `sinks::otlp_redelivery`), and those it gave up on.
    otlp_verdicts_pending: AtomicU64,
    otlp_verdicts_lost: AtomicU64,
    /// The OTLP reorder stage (see `pipeline::reorder`): records waiting, records fed
    /// out of order, cap overflows.
    reorder_held: AtomicU64,
    reorder_late: AtomicU64,
    reorder_overflows: AtomicU64,
    /// Idle discovered targets whose slot went to a new name (see `pipeline::router`).
    targets_evicted: AtomicU64,
    /// Targets set aside after repeated guest traps of their own calls (see
    /// `pipeline::quarantine`): quarantined now, and quarantines begun since start.
    targets_quarantined: AtomicU64,
    target_quarantines: AtomicU64,
    /// Failed publishes and flushes per sink name; a few sinks, failures rare: a lock is fine.
    sink_errors: Mutex<Vec<(&'static str, u64)>>,
    /// Live captures, each once started.
    live: Mutex<Vec<Arc<LiveSource>>>,
    /// True while the engine thread runs (set by `EngineTask::new`, cleared however the
    /// thread ends): without it nothing is analysed although sources keep counting events
    /// as received, so `/healthz` and `faultline_engine_up` must show it.
    engine_alive: Arc<AtomicBool>,
    /// Set when the engine thread saw its queue close (faultline is stopping): its end is
    /// then the shutdown's doing, which the OTLP push must not report as a failure.
    engine_drained: AtomicBool,
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
    /// A live capture named `name` that starts reading now (one entry per start: a source
    /// name is registered once per run).
    pub fn start_live(&self, name: &'static str) -> Arc<LiveSource> {
        let s = Arc::new(LiveSource::new(name));
        let mut v = self.live.lock().unwrap_or_else(|e| e.into_inner());
        v.retain(|l| l.name != name);
        v.push(s.clone());
        s
    }
    /// The live captures started.
    pub fn live_sources(&self) -> Vec<Arc<LiveSource>> {
        self.live.lock().unwrap_or_else(|e| e.into_inner()).clone()
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
    pub fn add_guest_trap(&self, reason: TrapReason) {
        self.guest_traps[reason as usize].fetch_add(1, Ordering::Relaxed);
    }
    pub fn add_guest_restart_failure(&self) {
        self.guest_restart_failures.fetch_add(1, Ordering::Relaxed);
    }
    /// One idle discovered target evicted for a new name.
    pub fn add_target_evicted(&self) {
        self.targets_evicted.fetch_add(1, Ordering::Relaxed);
    }
    /// Discovered targets evicted since start, so operators see helpers churning slots.
    pub fn targets_evicted(&self) -> u64 {
        self.targets_evicted.load(Ordering::Relaxed)
    }
    /// `now` targets are quarantined, `begun` more quarantines began since the last call.
    pub fn set_quarantined(&self, now: usize, begun: u64) {
        self.targets_quarantined
            .store(now as u64, Ordering::Relaxed);
        self.target_quarantines.fetch_add(begun, Ordering::Relaxed);
    }
    /// Targets quarantined now, so an operator sees one target's analysis is off.
    pub fn targets_quarantined(&self) -> u64 {
        self.targets_quarantined.load(Ordering::Relaxed)
    }
    /// Quarantines begun since start.
    pub fn target_quarantines(&self) -> u64 {
        self.target_quarantines.load(Ordering::Relaxed)
    }
    pub fn guest_restarts(&self) -> u64 {
        self.guest_restarts.load(Ordering::Relaxed)
    }
    pub fn guest_restart_failures(&self) -> u64 {
        self.guest_restart_failures.load(Ordering::Relaxed)
    }
    /// Traps of every reason: what `faultline_guest_traps_total` counted before it had a
    /// `reason` label.
    pub fn guest_traps(&self) -> u64 {
        TrapReason::ALL
            .iter()
            .map(|r| self.guest_traps_by(*r))
            .sum()
    }
    pub fn guest_traps_by(&self, reason: TrapReason) -> u64 {
        self.guest_traps[reason as usize].load(Ordering::Relaxed)
    }
    /// A WASM host with memory limit `limit_bytes` now exists, its guest live: from here
    /// the guest gauges are exported. Returns the host's token for [`Telemetry::clear_guest`].
    pub fn set_guest_hosted(&self, limit_bytes: u64) -> u64 {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let owner = NEXT.fetch_add(1, Ordering::Relaxed);
        let g = &self.guest;
        g.memory_limit_bytes.store(limit_bytes, Ordering::Relaxed);
        g.up.store(true, Ordering::Relaxed);
        g.owner.store(owner, Ordering::Relaxed);
        owner
    }
    /// The WASM host `owner` is gone (the engine thread ended): no guest gauges any more,
    /// rather than a last value that reads as a live guest's. A host that replaced it
    /// keeps its own.
    pub fn clear_guest(&self, owner: u64) {
        let _ = self
            .guest
            .owner
            .compare_exchange(owner, 0, Ordering::Relaxed, Ordering::Relaxed);
    }
    /// After a guest call: whether a guest is live, and its memory's size. Two relaxed
    /// stores, cheap enough for every call.
    pub fn set_guest_state(&self, up: bool, memory_bytes: u64) {
        self.guest.up.store(up, Ordering::Relaxed);
        self.guest
            .memory_bytes
            .store(memory_bytes, Ordering::Relaxed);
    }
    /// The guest's gauges; `None` unless the engine is a WASM guest.
    pub fn guest(&self) -> Option<GuestGauges> {
        let g = &self.guest;
        (g.owner.load(Ordering::Relaxed) != 0).then(|| GuestGauges {
            up: g.up.load(Ordering::Relaxed),
            memory_bytes: g.memory_bytes.load(Ordering::Relaxed),
            memory_limit_bytes: g.memory_limit_bytes.load(Ordering::Relaxed),
        })
    }
    /// A WASM engine whose guest is not running (a failed restart backing off): no batch
    /// is analysed meanwhile, which `/healthz` must show.
    pub fn guest_unavailable(&self) -> bool {
        self.guest().is_some_and(|g| !g.up)
    }
    /// Counts one failed export; returns the count so far.
    pub fn add_otlp_export_failure(&self, signal: OtlpSignal) -> u64 {
        self.otlp_export_failures[signal as usize].fetch_add(1, Ordering::Relaxed) + 1
    }
    pub fn otlp_export_failures(&self, signal: OtlpSignal) -> u64 {
        self.otlp_export_failures[signal as usize].load(Ordering::Relaxed)
    }
    pub fn set_otlp_verdicts_pending(&self, n: u64) {
        self.otlp_verdicts_pending.store(n, Ordering::Relaxed);
    }
    pub fn otlp_verdicts_pending(&self) -> u64 {
        self.otlp_verdicts_pending.load(Ordering::Relaxed)
    }
    /// Counts `n` verdict records given up on; returns the count so far.
    pub fn add_otlp_verdicts_lost(&self, n: u64) -> u64 {
        self.otlp_verdicts_lost.fetch_add(n, Ordering::Relaxed) + n
    }
    pub fn otlp_verdicts_lost(&self) -> u64 {
        self.otlp_verdicts_lost.load(Ordering::Relaxed)
    }
    /// The reorder stage's state: records held now, and the totals so far.
    pub fn set_reorder(&self, held: u64, late: u64, overflows: u64) {
        self.reorder_held.store(held, Ordering::Relaxed);
        self.reorder_late.store(late, Ordering::Relaxed);
        self.reorder_overflows.store(overflows, Ordering::Relaxed);
    }
    /// (held, fed out of order, overflows) of the reorder stage.
    pub fn reorder(&self) -> (u64, u64, u64) {
        (
            self.reorder_held.load(Ordering::Relaxed),
            self.reorder_late.load(Ordering::Relaxed),
            self.reorder_overflows.load(Ordering::Relaxed),
        )
    }
    /// Makes `sink`'s error counter exist at 0, so an alert on its rate has a series to
    /// watch before the first failure.
    pub fn register_sink(&self, sink: &'static str) {
        self.add_sink_errors(sink, 0);
    }
    /// `sink` failed to publish a report or to flush.
    pub fn add_sink_error(&self, sink: &'static str) {
        self.add_sink_errors(sink, 1);
    }
    fn add_sink_errors(&self, sink: &'static str, n: u64) {
        let mut v = self.sink_errors.lock().unwrap_or_else(|e| e.into_inner());
        match v.iter_mut().find(|(name, _)| *name == sink) {
            Some((_, count)) => *count += n,
            None => v.push((sink, n)),
        }
    }
    /// The engine thread's liveness flag, shared with whoever must see it end (`/healthz`).
    pub fn engine_alive_flag(&self) -> Arc<AtomicBool> {
        self.engine_alive.clone()
    }
    /// Whether the engine thread runs (`faultline_engine_up`).
    pub fn engine_up(&self) -> bool {
        self.engine_alive.load(Ordering::Relaxed)
    }
    /// The engine thread's queue closed: it ends because faultline stops.
    pub fn set_engine_drained(&self) {
        self.engine_drained.store(true, Ordering::Relaxed);
    }
    /// Whether the engine thread ended (or is ending) because faultline stops.
    pub fn engine_drained(&self) -> bool {
        self.engine_drained.load(Ordering::Relaxed)
    }
    /// Each registered sink's failures so far, in registration order.
    pub fn sink_errors(&self) -> Vec<(&'static str, u64)> {
        self.sink_errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_capture_is_down_once_it_ends_by_itself_not_when_we_stop_it() {
        let t = Telemetry::default();
        let perf = t.start_live("perf");
        assert!(!perf.is_down());
        perf.set_run(SourceRun::Ended);
        assert!(perf.is_down());
        let perf = t.start_live("perf");
        perf.set_run(SourceRun::Failed);
        assert!(perf.is_down());
        assert_eq!(t.live_sources().len(), 1, "one entry per name");

        // Our own stop comes first; the capture's end that follows is the stop's doing.
        let lttng = t.start_live("lttng");
        lttng.set_run(SourceRun::Stopped);
        lttng.set_run(SourceRun::Failed);
        assert_eq!(lttng.run(), SourceRun::Stopped);
        assert!(!lttng.is_down());
    }

    #[test]
    fn guest_gauges_exist_only_while_a_wasm_host_does() {
        let t = Telemetry::default();
        assert_eq!(t.guest(), None, "native or not started: no gauges");
        assert!(!t.guest_unavailable());
        let first = t.set_guest_hosted(128 << 20);
        let owner = t.set_guest_hosted(256 << 20);
        t.clear_guest(first);
        assert!(
            t.guest().is_some(),
            "a replaced host does not clear its successor's"
        );
        t.set_guest_state(true, 3 << 20);
        assert_eq!(
            t.guest(),
            Some(GuestGauges {
                up: true,
                memory_bytes: 3 << 20,
                memory_limit_bytes: 256 << 20,
            })
        );
        t.set_guest_state(false, 0);
        assert!(t.guest_unavailable());
        t.clear_guest(owner);
        assert_eq!(t.guest(), None);
        assert!(!t.guest_unavailable());
    }

    #[test]
    fn traps_are_counted_by_reason_and_in_total() {
        let t = Telemetry::default();
        t.add_guest_trap(TrapReason::MemoryLimit);
        t.add_guest_trap(TrapReason::MemoryLimit);
        t.add_guest_trap(TrapReason::Other);
        assert_eq!(t.guest_traps_by(TrapReason::MemoryLimit), 2);
        assert_eq!(t.guest_traps_by(TrapReason::Timeout), 0);
        assert_eq!(t.guest_traps(), 3);
    }
}
