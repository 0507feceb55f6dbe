//! The memory bound: 10,000 threads each using more syscall types than the per-thread
//! cap must stay within 64 MiB of engine state, and `state_bytes` must account for it.

use faultline_engine::synth::{generate, StreamSpec};
use faultline_engine::{Engine, Params, SyscallEvent};

fn spec() -> StreamSpec {
    StreamSpec {
        threads: 10_000,
        syscall_types: 40,
        seconds: 0.4,
        calls_per_thread_per_second: 150.0,
        seed: 9,
        ..StreamSpec::default()
    }
}

/// The stream of `spec()` through a new engine, with `extra` records after it.
fn state_after(extra: &[SyscallEvent]) -> (Engine, usize) {
    let mut e = Engine::new(Params::default()).expect("valid");
    let mut batch = Vec::with_capacity(8192);
    for ev in generate(&spec()) {
        batch.push(ev);
        if batch.len() == 8192 {
            e.ingest("big", &batch);
            batch.clear();
        }
    }
    e.ingest("big", &batch);
    e.ingest("big", extra);
    assert_eq!(e.thread_count("big"), 10_000);
    let bytes = e.state_bytes();
    (e, bytes)
}

#[test]
fn ten_thousand_threads_fit_in_64_mib() {
    let (_, bytes) = state_after(&[]);
    println!(
        "state bytes at 10,000 threads: {bytes} ({:.1} MiB)",
        bytes as f64 / 1048576.0
    );
    assert!(bytes <= 64 << 20, "{bytes} bytes");
    // Honest accounting: at least one thread record per thread.
    assert!(bytes >= 10_000 * std::mem::size_of::<faultline_engine::thread::Thread>());
}

/// With the scheduler's records every thread also holds its CPU account
/// (`cpu_time::CpuBins`): the bound still holds.
#[test]
fn ten_thousand_threads_with_scheduler_records_fit_in_64_mib() {
    let s = spec();
    let at = s.start_ns + 300_000_000;
    let sched: Vec<SyscallEvent> = (0..s.threads)
        .flat_map(|i| {
            let tid = s.pid + i;
            [
                SyscallEvent::on_cpu(s.pid, tid, at, 1_000_000),
                SyscallEvent::off_cpu(s.pid, tid, at, i % 2 == 0),
            ]
        })
        .collect();
    let (_, bytes) = state_after(&sched);
    println!(
        "state bytes at 10,000 threads with scheduler records: {bytes} ({:.1} MiB)",
        bytes as f64 / 1048576.0
    );
    assert!(bytes <= 64 << 20, "{bytes} bytes");
    let (_, without) = state_after(&[]);
    let per_thread = std::mem::size_of::<faultline_engine::cpu_time::CpuBins>();
    assert!(
        bytes >= without + 10_000 * per_thread,
        "{bytes} vs {without}"
    );
}
