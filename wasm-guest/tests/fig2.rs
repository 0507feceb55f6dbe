//! The paper's Fig. 2 worked example (k = 2): in execution unit λ1 starting at t0, the
//! moving average of `write` goes 20 ms → 19 ms → 60 ms; the third window is the outlier
//! and the onset is σ = t7 − t0.

use faultline_engine::report::{Trigger, Verdict};
use faultline_engine::{Engine, Params, SyscallEvent, SyscallId};

const MS: u64 = 1_000_000;
const PID: u32 = 7;
const TID: u32 = 7;

/// The paper's literal detector: k = 2, a single outlier moving average is enough
/// (`confirm_runs = 1`), one affected thread makes an anomaly, it need not last
/// (`min_persistence = 0`: the example ends at its outlier), and the pause that starts
/// λ1 is only a unit boundary (`stall_min_calls = 0`), as in the paper.
fn params() -> Params {
    Params {
        moving_average_k: 2,
        confirm_runs: 1,
        min_affected_threads: 1,
        min_persistence: 0.0,
        stall_min_calls: 0,
        ..Params::default()
    }
}

/// A healthy history: read (1 ms) then write alternating 19/21 ms (k = 2 averages of
/// exactly 20 ms), 1 ms apart, for `seconds`.
fn history(start: u64, seconds: u64) -> (Vec<SyscallEvent>, u64) {
    let (read, write) = (SyscallId::from_name("read"), SyscallId::from_name("write"));
    let mut ev = Vec::new();
    let mut t = start;
    let mut i = 0u64;
    while t < start + seconds * 1000 * MS {
        ev.push(SyscallEvent::complete(PID, TID, read, t, MS));
        t += 2 * MS;
        let d = if i.is_multiple_of(2) {
            19 * MS
        } else {
            21 * MS
        };
        ev.push(SyscallEvent::complete(PID, TID, write, t, d));
        t += d + MS;
        i += 1;
    }
    (ev, t)
}

#[test]
fn fig2_onset_is_t7_minus_t0() {
    let (read, write) = (SyscallId::from_name("read"), SyscallId::from_name("write"));
    assert_ne!(write, SyscallId::UNKNOWN);
    let mut engine = Engine::new(params()).expect("valid");
    let (hist, end) = history(1_000_000 * MS, 40);
    engine.ingest("fig2", &hist);
    // A pause longer than α splits the stream: λ1 starts at t0.
    let t0 = end + 2000 * MS;
    // t0 read, t1 write 20, t2 read, t3 write 20, t4 read, t5 write 18, t6 read, t7 write 102:
    // write moving averages (k = 2): (20+20)/2 = 20, (20+18)/2 = 19, (18+102)/2 = 60.
    let durations = [20, 20, 18, 102];
    let mut ev = Vec::new();
    let mut t = t0;
    let mut t7 = 0;
    for d in durations {
        ev.push(SyscallEvent::complete(PID, TID, read, t, MS));
        t += 2 * MS;
        t7 = t;
        ev.push(SyscallEvent::complete(PID, TID, write, t, d * MS));
        t += d * MS + MS;
    }
    engine.ingest("fig2", &ev);
    let r = engine.trigger("fig2", t0).expect("target known");
    assert_eq!(r.trigger, Trigger::OnDemand);
    assert_eq!(r.threads.affected, 1, "{r:#?}");
    let sigma = r.onset_times_seconds.min;
    let expected = (t7 - t0) as f64 / 1e9;
    assert!(
        (sigma - expected).abs() < 1e-9,
        "σ = {sigma}, expected t7 − t0 = {expected}"
    );
    assert_eq!(
        r.top_syscalls_by_time.first().map(|s| s.syscall.as_str()),
        Some("write")
    );
    // The write average rose from a baseline of 20 ms to 60 ms: +200 %.
    let inc = r.top_syscalls_by_time[0].increase_ratio;
    assert!((inc - 2.0).abs() < 0.35, "increase {inc}");
    assert_ne!(r.verdict, Verdict::None);
}

#[test]
fn fig2_without_the_slow_write_is_healthy() {
    let (read, write) = (SyscallId::from_name("read"), SyscallId::from_name("write"));
    let mut engine = Engine::new(params()).expect("valid");
    let (hist, end) = history(1_000_000 * MS, 40);
    engine.ingest("fig2", &hist);
    let t0 = end + 2000 * MS;
    let mut ev = Vec::new();
    let mut t = t0;
    for d in [20, 20, 18, 22] {
        ev.push(SyscallEvent::complete(PID, TID, read, t, MS));
        t += 2 * MS;
        ev.push(SyscallEvent::complete(PID, TID, write, t, d * MS));
        t += d * MS + MS;
    }
    engine.ingest("fig2", &ev);
    let r = engine.trigger("fig2", t0).expect("target known");
    assert_eq!(r.verdict, Verdict::None);
    assert_eq!(r.threads.affected, 0);
}
