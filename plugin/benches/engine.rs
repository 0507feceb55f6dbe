//! Engine throughput and memory, native and inside wasmtime, printed as a table
//! (run: `cargo bench -p faultline --bench engine`).
//!
//! Streams come from `faultline_engine::synth` (realistic roles, ~50 syscall types, an
//! environment fault two thirds in), are generated before timing, and are fed in batches
//! of 4096 events like the pipeline does, draining reports every 64 batches. Each case
//! runs a few times on a fresh engine and the median is reported.
//!
//! Issue targets: native ≥ 10 M events/s per core, WASM ≥ 0.7× native, engine state
//! ≤ 64 MiB at 10,000 threads. Peak RSS is measured in a child process per hosting
//! (re-running this binary with `FL_BENCH_RSS_CHILD`), so pre-generated events and the
//! other hosting do not count against it.
//!
//! Knobs: `FL_BENCH_QUICK=1` runs only the first case once; `FL_BENCH_NO_DEADLINE=1` runs
//! the WASM host without the epoch deadline (shows its cost); `FAULTLINE_WASM_PERFMAP=1`
//! lets `perf record` name the guest's JIT-compiled functions.

use std::hint::black_box;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use faultline::engine_host::{EngineHost, HostConfig, NativeHost, WasmHost};
use faultline::pipeline::telemetry::Telemetry;
use faultline_engine::synth::{generate, EventShape, FaultScope, FaultSpec, StreamSpec};
use faultline_engine::{Params, SyscallEvent};

const BATCH: usize = 4096;
const DRAIN_EVERY: usize = 64;
const REPS: usize = 3;
const EVENTS_PER_CASE: usize = 2_000_000;
const STREAM_SECONDS: f64 = 30.0;
const RSS_CHILD_ENV: &str = "FL_BENCH_RSS_CHILD";
/// `FL_BENCH_QUICK=1`: only the first case, once, no RSS children (for quick comparisons).
const QUICK_ENV: &str = "FL_BENCH_QUICK";

fn spec(threads: u32, shape: EventShape) -> StreamSpec {
    // Synth threads average 1.25× the nominal rate; enter/exit doubles the records per call.
    let per_call = if shape == EventShape::EnterExit {
        2.0
    } else {
        1.0
    };
    let rate = EVENTS_PER_CASE as f64 / (f64::from(threads) * STREAM_SECONDS * 1.25 * per_call);
    StreamSpec {
        threads,
        syscall_types: 50,
        seconds: STREAM_SECONDS,
        calls_per_thread_per_second: rate,
        seed: 2026,
        shape,
        fault: Some(FaultSpec {
            start_seconds: 20.0,
            affected_fraction: 0.9,
            onset_spread_seconds: 0.3,
            duration_multiplier: 4.0,
            rate_multiplier: 1.0,
            scope: FaultScope::AllSyscalls,
        }),
        ..StreamSpec::default()
    }
}

/// Feeds `events` through `host`; returns the time spent inside the engine calls and the
/// engine's state estimate before `finish`.
fn run(host: &mut dyn EngineHost, events: &[SyscallEvent]) -> (Duration, usize) {
    let start = Instant::now();
    for (i, chunk) in events.chunks(BATCH).enumerate() {
        if let Err(e) = host.ingest("bench", chunk) {
            panic!("ingest failed: {e}");
        }
        if i % DRAIN_EVERY == DRAIN_EVERY - 1 {
            black_box(host.take_reports().ok());
        }
    }
    black_box(host.take_reports().ok());
    let elapsed = start.elapsed();
    let state = host.state_bytes().unwrap_or(0);
    black_box(host.finish().ok());
    (elapsed, state)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
}

fn new_host(wasm: bool) -> Box<dyn EngineHost> {
    let params = Params::default();
    if wasm {
        let telemetry = Arc::new(Telemetry::default());
        let config = HostConfig {
            call_timeout_ms: if std::env::var_os("FL_BENCH_NO_DEADLINE").is_some() {
                None
            } else {
                HostConfig::default().call_timeout_ms
            },
            ..HostConfig::default()
        };
        match WasmHost::new(&config, params, telemetry) {
            Ok(h) => Box::new(h),
            Err(e) => panic!("cannot start the WASM host: {e}"),
        }
    } else {
        match NativeHost::new(params) {
            Ok(h) => Box::new(h),
            Err(e) => panic!("cannot start the native host: {e}"),
        }
    }
}

/// Median events/s over `REPS` fresh engines, and the state estimate.
fn measure(wasm: bool, events: &[SyscallEvent]) -> (f64, usize) {
    let mut rates = Vec::new();
    let mut state = 0;
    let reps = if quick() { 1 } else { REPS };
    for _ in 0..reps {
        let mut host = new_host(wasm);
        let (t, s) = run(host.as_mut(), events);
        rates.push(events.len() as f64 / t.as_secs_f64());
        state = s;
    }
    (median(rates), state)
}

fn quick() -> bool {
    std::env::var_os(QUICK_ENV).is_some()
}

/// Encode and decode of the WASM batch layout alone, natively (events/s each): the
/// ABI's share of a WASM call.
fn codec_rates(events: &[SyscallEvent]) -> (f64, f64) {
    use faultline_engine::abi::batch::{decode_batch, encode_batch};
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let (mut enc, mut dec) = (Duration::ZERO, Duration::ZERO);
    for chunk in events.chunks(BATCH) {
        let t = Instant::now();
        if encode_batch("bench", chunk, &mut buf).is_err() {
            return (f64::NAN, f64::NAN);
        }
        enc += t.elapsed();
        let t = Instant::now();
        black_box(decode_batch(&buf, &mut out).ok());
        dec += t.elapsed();
    }
    let n = events.len() as f64;
    (n / enc.as_secs_f64(), n / dec.as_secs_f64())
}

fn status_kib(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Child mode: stream a 10,000-thread case through one hosting without holding the
/// events, then print the peak RSS in KiB.
fn rss_child(kind: &str) {
    let mut host = new_host(kind == "wasm");
    let mut batch = Vec::with_capacity(BATCH);
    let mut stream = generate(&spec(10_000, EventShape::Complete));
    loop {
        batch.clear();
        batch.extend(stream.by_ref().take(BATCH));
        if batch.is_empty() {
            break;
        }
        if let Err(e) = host.ingest("bench", &batch) {
            panic!("ingest failed: {e}");
        }
    }
    black_box(host.finish().ok());
    println!("{}", status_kib("VmHWM:").unwrap_or(0));
}

fn child_peak_rss_mib(kind: &str) -> String {
    let Ok(exe) = std::env::current_exe() else {
        return "n/a (no current_exe)".into();
    };
    match Command::new(exe).env(RSS_CHILD_ENV, kind).output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .trim()
            .parse::<u64>()
            .map(|kib| format!("{:.1}", kib as f64 / 1024.0))
            .unwrap_or_else(|_| "n/a".into()),
        Ok(o) => format!("n/a ({})", String::from_utf8_lossy(&o.stderr).trim()),
        Err(e) => format!("n/a ({e})"),
    }
}

const MIB: f64 = 1024.0 * 1024.0;

fn main() {
    if let Ok(kind) = std::env::var(RSS_CHILD_ENV) {
        rss_child(&kind);
        return;
    }
    // `cargo bench` passes `--bench`; a filter argument is not supported (fixed cases).
    let wall = Instant::now();
    println!("engine throughput: batches of {BATCH}, median of {REPS}, one core");
    println!();
    println!("| threads | shape | events | native M ev/s | wasm M ev/s | wasm/native | native state MiB | wasm state MiB |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|");
    let mut worst_native = f64::MAX;
    let mut worst_ratio = f64::MAX;
    let mut state_10k = 0usize;
    let mut codec = (f64::NAN, f64::NAN);
    'cases: for threads in [1_000u32, 10_000] {
        for shape in [EventShape::Complete, EventShape::EnterExit] {
            let events: Vec<SyscallEvent> = generate(&spec(threads, shape)).collect();
            if codec.0.is_nan() {
                codec = codec_rates(&events);
            }
            let (native, native_state) = measure(false, &events);
            let (wasm, wasm_state) = measure(true, &events);
            let ratio = wasm / native;
            worst_native = worst_native.min(native);
            worst_ratio = worst_ratio.min(ratio);
            if threads == 10_000 {
                state_10k = state_10k.max(native_state).max(wasm_state);
            }
            println!(
                "| {threads} | {shape:?} | {} | {:.2} | {:.2} | {ratio:.2} | {:.1} | {:.1} |",
                events.len(),
                native / 1e6,
                wasm / 1e6,
                native_state as f64 / MIB,
                wasm_state as f64 / MIB,
            );
            if quick() {
                break 'cases;
            }
        }
    }
    println!();
    println!(
        "ABI batch codec alone (native): encode {:.1} M events/s, decode {:.1} M events/s",
        codec.0 / 1e6,
        codec.1 / 1e6
    );
    if quick() {
        return;
    }
    println!();
    println!("| memory at 10,000 threads | MiB |");
    println!("|---|---:|");
    println!(
        "| engine state (max of cases, state_bytes) | {:.1} |",
        state_10k as f64 / MIB
    );
    println!(
        "| peak RSS, native host (child VmHWM) | {} |",
        child_peak_rss_mib("native")
    );
    println!(
        "| peak RSS, wasm host (child VmHWM) | {} |",
        child_peak_rss_mib("wasm")
    );
    println!();
    let verdict = |ok: bool| if ok { "PASS" } else { "FAIL" };
    println!("| target | measured | |");
    println!("|---|---:|---|");
    println!(
        "| native ≥ 10 M events/s (worst case) | {:.2} M | {} |",
        worst_native / 1e6,
        verdict(worst_native >= 10e6)
    );
    println!(
        "| wasm ≥ 0.7× native (worst case) | {worst_ratio:.2} | {} |",
        verdict(worst_ratio >= 0.7)
    );
    println!(
        "| state ≤ 64 MiB at 10,000 threads | {:.1} MiB | {} |",
        state_10k as f64 / MIB,
        verdict(state_10k as f64 <= 64.0 * MIB)
    );
    println!();
    println!("total bench time {:.1} s", wall.elapsed().as_secs_f64());
}
