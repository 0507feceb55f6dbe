//! Scheduler records at 4-ms ticks of every thread of a generated stream, and an engine
//! fed with them, for the tests of the rules that read how threads leave their CPU
//! (`cpu_quota.rs`, `paging.rs`).
//!
//! Include with `#[path = "common/ticks.rs"] mod ticks;`.

use faultline_engine::report::Report;
use faultline_engine::synth::{generate, FaultSpec, StreamSpec};
use faultline_engine::{Engine, Params, SyscallEvent};

/// The scheduler tick the records come at.
pub const TICK_NS: u64 = 4_000_000;
/// The CPU's idle task.
pub const IDLE: u32 = 0;

/// When the streams' fault begins, seconds after their start.
pub const FAULT_AT: f64 = 40.0;

/// When `s`'s fault begins.
pub fn fault_start_ns(s: &StreamSpec) -> u64 {
    s.start_ns + (FAULT_AT * 1e9) as u64
}

/// `fraction` of the threads slowed ×8 from [`FAULT_AT`], at onsets up to `spread_seconds`
/// apart.
pub fn slowdown(fraction: f64, spread_seconds: f64) -> FaultSpec {
    FaultSpec {
        start_seconds: FAULT_AT,
        affected_fraction: fraction,
        onset_spread_seconds: spread_seconds,
        duration_multiplier: 8.0,
        ..FaultSpec::default()
    }
}

/// 32 threads of 24 syscall types over 50 s, 200 calls a second each, with `fault`.
pub fn stream(seed: u64, fault: Option<FaultSpec>) -> StreamSpec {
    StreamSpec {
        threads: 32,
        syscall_types: 24,
        seconds: 50.0,
        calls_per_thread_per_second: 200.0,
        seed,
        fault,
        ..StreamSpec::default()
    }
}

/// `s`'s calls plus, at every 4-ms tick of every thread, 1 % of the tick on a CPU and the
/// switch away `off(tid, at, tick index)` returns, in time order.
pub fn with_ticks(
    s: &StreamSpec,
    off: impl Fn(u32, u64, u64) -> SyscallEvent,
) -> Vec<SyscallEvent> {
    let mut events: Vec<SyscallEvent> = generate(s).collect();
    let end = s.start_ns + (s.seconds * 1e9) as u64;
    for i in 0..s.threads {
        let tid = s.pid + i;
        let mut at = s.start_ns + TICK_NS * (1 + u64::from(i) % 7);
        while at < end {
            events.push(SyscallEvent::on_cpu(s.pid, tid, at, TICK_NS / 100));
            events.push(off(tid, at, at / TICK_NS));
            at += TICK_NS;
        }
    }
    events.sort_by_key(|e| e.ts_ns);
    events
}

/// Thread `tid` of `s` on a CPU 95 % of every tick from `from_ns` on (a CPU burner),
/// `events` kept in time order.
pub fn add_burner(events: &mut Vec<SyscallEvent>, s: &StreamSpec, tid: u32, from_ns: u64) {
    let end = s.start_ns + (s.seconds * 1e9) as u64;
    let mut at = from_ns;
    while at < end {
        events.push(SyscallEvent::on_cpu(s.pid, tid, at + 1, TICK_NS * 95 / 100));
        at += TICK_NS;
    }
    events.sort_by_key(|e| e.ts_ns);
}

/// A default engine fed `events` as target `svc` in batches of 4,096 (as a source hands
/// them over), and its continuous reports.
pub fn run(events: &[SyscallEvent]) -> (Vec<Report>, Engine) {
    let mut engine = Engine::new(Params::default()).expect("valid params");
    let mut reports = Vec::new();
    for chunk in events.chunks(4096) {
        engine.ingest("svc", chunk);
        reports.extend(engine.take_reports());
    }
    (reports, engine)
}
