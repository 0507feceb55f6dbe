//! A report's call rates (`syscalls[].calls_per_second`, exported as
//! `faultline_syscall_calls_per_second`) are the target's rates whatever its age: a target
//! younger than the window made its calls since its first record, not over the whole
//! window (a restarted faultline's rates used to climb from a ninth to the true rate over
//! its first 90 s).

use faultline_engine::syscalls::SyscallId;
use faultline_engine::{Engine, Params, SyscallEvent};

const MS: u64 = 1_000_000;
const S: u64 = 1_000 * MS;
const START: u64 = 5_000 * S;

/// Four threads, each reading every 40 ms (25 calls a second, 100 together) for `secs`.
fn steady(secs: u64) -> Vec<SyscallEvent> {
    let read = SyscallId::from_name("read");
    let mut ev = Vec::new();
    for tid in 1..=4u32 {
        let mut t = START + u64::from(tid) * 7 * MS;
        while t < START + secs * S {
            ev.push(SyscallEvent::complete(1, tid, read, t, 50_000));
            t += 40 * MS;
        }
    }
    ev.sort_by_key(|e| e.ts_ns);
    ev
}

#[test]
fn a_young_targets_rates_are_its_own_not_diluted_by_the_window() {
    let params = Params::default();
    let window_s = params.window_seconds;
    let mut engine = Engine::new(params).expect("defaults");
    let mut reports = Vec::new();
    for c in steady(200).chunks(4096) {
        engine.ingest("svc", c);
        reports.extend(engine.take_reports());
    }
    let young = reports
        .iter()
        .filter(|r| ((r.window_end_ns - START) as f64) < window_s * 1e9)
        .count();
    assert!(young >= 3, "{young} reports younger than the window");
    assert!(reports.len() > young + 3, "{} reports", reports.len());
    for r in &reports {
        let read = r.syscalls.iter().find(|s| s.syscall == "read");
        let rate = read.map_or(0.0, |s| s.calls_per_second);
        let age = (r.window_end_ns - START) as f64 / 1e9;
        assert!(
            (rate - 100.0).abs() <= 5.0,
            "at {age:.0} s: {rate:.1} calls/s, not 100"
        );
    }
}
