//! The memory bound: 10,000 threads each using more syscall types than the per-thread
//! cap must stay within 64 MiB of engine state, and `state_bytes` must account for it.

use faultline_engine::synth::{generate, StreamSpec};
use faultline_engine::{Engine, Params};

#[test]
fn ten_thousand_threads_fit_in_64_mib() {
    let spec = StreamSpec {
        threads: 10_000,
        syscall_types: 40,
        seconds: 0.4,
        calls_per_thread_per_second: 150.0,
        seed: 9,
        ..StreamSpec::default()
    };
    let mut e = Engine::new(Params::default()).expect("valid");
    let mut batch = Vec::with_capacity(8192);
    for ev in generate(&spec) {
        batch.push(ev);
        if batch.len() == 8192 {
            e.ingest("big", &batch);
            batch.clear();
        }
    }
    e.ingest("big", &batch);
    assert_eq!(e.thread_count("big"), 10_000);
    let bytes = e.state_bytes();
    println!(
        "state bytes at 10,000 threads: {bytes} ({:.1} MiB)",
        bytes as f64 / 1048576.0
    );
    assert!(bytes <= 64 << 20, "{bytes} bytes");
    // Honest accounting: at least one thread record per thread.
    assert!(bytes >= 10_000 * std::mem::size_of::<faultline_engine::thread::Thread>());
}
