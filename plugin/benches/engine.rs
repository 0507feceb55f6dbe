//! Engine throughput and memory, native and inside wasmtime, printed as a table
//! (run: `cargo bench -p faultline --bench engine`).
//!
//! Streams come from `faultline_engine::synth` (realistic roles, ~50 syscall types, an
//! environment fault two thirds in), in two interleavings: *uniform* (every event from a
//! random thread: the worst case for caches, which no machine with fewer CPUs than threads
//! produces) and *bursty* (threads make runs of ~8 calls, about one mid-run at a time:
//! still less thread locality than any real trace measured — the `local` column is the
//! share of events whose thread is one of the 8 most recently seen; real traces: 0.92 for
//! the 8,030-thread LTTng `many-threads` trace, 0.98–1.0 for MariaDB/PostgreSQL/Apache perf
//! traces). They are generated before timing, and are fed in batches
//! of 4096 events like the pipeline does, draining reports every 64 batches. Each case
//! runs a few times on a fresh engine, in memory the previous one used (see [`measure`]),
//! and the median is reported. Rates are events per
//! second of the calling thread's CPU time (the engine runs on it in both hostings), so
//! other processes sharing the core do not count.
//!
//! Issue targets: native ≥ 10 M events/s per core, WASM ≥ 0.7× native, engine state
//! ≤ 64 MiB at 10,000 threads. Peak RSS is measured in a child process per hosting
//! (re-running this binary with `FL_BENCH_RSS_CHILD`), so pre-generated events and the
//! other hosting do not count against it.
//!
//! Two last cases replay real traces, decoded to batches before timing, each batch fed to
//! the target named by its process: a MariaDB perf-script trace (~20 threads, enter/exit
//! halves) and the public LTTng `many-threads` kernel trace (8 CPUs, thousands of threads,
//! most living for a few dozen syscalls: thread creation dominates).
//!
//! Knobs: `FL_BENCH_QUICK=1` runs only the first case once; `FL_BENCH_CASES=10000/Complete/bursty,real`
//! runs only the listed cases (`threads/shape/interleaving`, `real` or `lttng`); `FL_BENCH_HOSTS=native` (or
//! `wasm`) runs one hosting; `FL_BENCH_REPS=n` overrides the repetitions;
//! `FL_BENCH_DIGEST=1` also prints a hash of every report each case produced
//! (continuous, `finish` and an on-demand trigger), so an optimisation can be checked
//! to leave the results bit for bit unchanged; `FL_BENCH_NO_DEADLINE=1` runs the WASM
//! host without a call deadline, `FL_BENCH_EPOCH=1` with the epoch deadline instead of the
//! default memory fence (each shows its cost); `FL_BENCH_COLD_WASM=1` gives each
//! WASM repetition a fresh instance (shows the cost of faulting its memory in);
//! `FL_BENCH_WARM=1` reads each batch once, untimed, just before it is fed (as a source
//! hands over a batch it just built, instead of one from a queue backlog in memory);
//! `FL_BENCH_NO_HUGE_PAGES=1` runs both hosts with `[engine] huge_pages = false` (shows
//! what the huge pages give); `FAULTLINE_WASM_PERFMAP=1` lets
//! `perf record` name the guest's JIT-compiled functions.

#[path = "../../wasm-guest/tests/common/traces.rs"]
mod traces;

use std::hint::black_box;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use faultline::engine_host::{EngineHost, HostConfig, NativeHost, TimeoutMechanism, WasmHost};
use faultline::pipeline::telemetry::{SourceStats, Telemetry};
use faultline::sources::perf::PerfScriptReader;
use faultline::sources::BatchReader;
use faultline_engine::synth::{
    generate, thread_locality, BurstSpec, EventShape, FaultScope, FaultSpec, StreamSpec,
};
use faultline_engine::syscalls::Arch;
use faultline_engine::{Params, Report, SyscallEvent};

const BATCH: usize = 4096;
const DRAIN_EVERY: usize = 64;
const REPS: usize = 3;
const EVENTS_PER_CASE: usize = 2_000_000;
const STREAM_SECONDS: f64 = 30.0;
const RSS_CHILD_ENV: &str = "FL_BENCH_RSS_CHILD";
/// `FL_BENCH_WARM=1`: each batch is in cache when fed (see the module docs).
const WARM_ENV: &str = "FL_BENCH_WARM";
/// `FL_BENCH_QUICK=1`: only the first case, once, no RSS children (for quick comparisons).
const QUICK_ENV: &str = "FL_BENCH_QUICK";
/// The real trace of the last case (skipped when missing; the shared traces directory is
/// found as the tests find it: `wasm-guest/tests/common/traces.rs`).
fn real_trace() -> std::path::PathBuf {
    traces::root().join("perf-faults/mariadb_cpu_cap/trace.txt.zst")
}
/// A real LTTng kernel trace with thousands of threads (8 CPUs; skipped when missing or
/// when babeltrace2 is not installed).
fn real_lttng() -> std::path::PathBuf {
    traces::root().join("lttng/many-threads")
}
/// Target name of the synthetic streams.
const SYNTH_TARGET: &str = "bench";

/// Bursts of the *bursty* cases: ~8 calls per run, about one thread mid-run at a time.
const BURST: BurstSpec = BurstSpec {
    mean_calls: 8.0,
    concurrency: 1.0,
};

fn spec(threads: u32, shape: EventShape, bursty: bool) -> StreamSpec {
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
        burst: bursty.then_some(BURST),
        ..StreamSpec::default()
    }
}

/// One benchmark input: named batches, fed in order.
struct Case {
    name: String,
    threads: String,
    shape: String,
    interleaving: &'static str,
    /// Share of events whose thread is one of the 8 most recently seen.
    locality: f64,
    batches: Vec<(String, Vec<SyscallEvent>)>,
    events: usize,
}

impl Case {
    fn synth(threads: u32, shape: EventShape, bursty: bool) -> Self {
        let events: Vec<SyscallEvent> = generate(&spec(threads, shape, bursty)).collect();
        let n = events.len();
        let interleaving = if bursty { "bursty" } else { "uniform" };
        Self {
            name: format!("{threads}/{shape:?}/{interleaving}"),
            threads: threads.to_string(),
            shape: format!("{shape:?}"),
            interleaving,
            locality: thread_locality(&events, 8),
            batches: events
                .chunks(BATCH)
                .map(|c| (SYNTH_TARGET.to_string(), c.to_vec()))
                .collect(),
            events: n,
        }
    }

    /// The real trace as the perf source batches it (per process, ≤ 1 s of trace time).
    fn real() -> Option<Self> {
        let stats = Arc::new(SourceStats::new("perf"));
        let reader = PerfScriptReader::open(&real_trace(), Arch::X86_64, stats).ok()?;
        Self::decoded("real", "real", reader)
    }

    /// The real LTTng trace as the LTTng source batches it (babeltrace2 + parse, before timing).
    fn real_lttng() -> Option<Self> {
        let stats = Arc::new(SourceStats::new("lttng"));
        let reader =
            faultline::sources::lttng::open(real_lttng().to_str()?, Arch::X86_64, stats).ok()?;
        Self::decoded("lttng", "LTTng", reader)
    }

    /// A real trace decoded by `reader` into batches, each routed to its process's target.
    fn decoded(name: &str, label: &str, mut reader: impl BatchReader) -> Option<Self> {
        let mut batches = Vec::new();
        let mut tids = std::collections::HashSet::new();
        while let Ok(Some(b)) = reader.next_batch() {
            let target = b.process.comm.clone().unwrap_or_else(|| "unknown".into());
            tids.extend(b.events.iter().map(|e| e.tid));
            batches.push((target, b.events));
        }
        let events = batches.iter().map(|(_, e)| e.len()).sum();
        if events == 0 {
            return None;
        }
        let all: Vec<SyscallEvent> = batches
            .iter()
            .flat_map(|(_, b)| b.iter().copied())
            .collect();
        Some(Self {
            name: name.into(),
            threads: format!("{label} ({})", tids.len()),
            shape: "EnterExit".into(),
            interleaving: "real",
            locality: thread_locality(&all, 8),
            batches,
            events,
        })
    }

    /// Latest event time (for the on-demand trigger of the digest).
    fn last_ns(&self) -> u64 {
        self.batches
            .iter()
            .flat_map(|(_, b)| b.iter().map(|e| e.ts_ns))
            .max()
            .unwrap_or(0)
    }
}

/// What one run produced.
struct RunOut {
    elapsed: Duration,
    state: usize,
    /// Hash of every report, in order (see `digest`).
    digest: u64,
}

/// FNV-1a over the reports' JSON: any change of any field changes it.
fn digest(h: &mut u64, reports: &[Report]) {
    for r in reports {
        let json = serde_json::to_vec(r).unwrap_or_default();
        for b in json.iter().chain(b"\n") {
            *h ^= u64::from(*b);
            *h = h.wrapping_mul(0x0000_0100_0000_01B3);
        }
    }
}

/// CPU time of the calling thread: the bench machine is shared, so wall time would
/// count other processes' slices; the engine runs on the calling thread in both hostings.
#[derive(Clone, Copy)]
struct CpuClock(Duration);

impl CpuClock {
    fn now() -> Self {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec and the clock id is a constant the
        // kernel supports for the calling thread.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        if rc != 0 {
            return Self(Duration::ZERO);
        }
        Self(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
    }

    fn elapsed(self) -> Duration {
        Self::now().0.saturating_sub(self.0)
    }
}

/// Feeds the case through `host`; times (in thread CPU time) only the engine calls.
fn run(host: &mut dyn EngineHost, case: &Case, with_digest: bool) -> RunOut {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut elapsed = Duration::ZERO;
    let warm = std::env::var_os(WARM_ENV).is_some();
    let mut start = CpuClock::now();
    for (i, (target, chunk)) in case.batches.iter().enumerate() {
        if warm {
            elapsed += start.elapsed();
            warm_up(chunk);
            start = CpuClock::now();
        }
        if let Err(e) = host.ingest(target, chunk) {
            panic!("ingest failed: {e}");
        }
        if i % DRAIN_EVERY == DRAIN_EVERY - 1 {
            let reports = host.take_reports().unwrap_or_default();
            if with_digest {
                elapsed += start.elapsed();
                digest(&mut h, &reports);
                start = CpuClock::now();
            }
            black_box(reports);
        }
    }
    let reports = host.take_reports().unwrap_or_default();
    elapsed += start.elapsed();
    digest(&mut h, &reports);
    let state = host.state_bytes().unwrap_or(0);
    if with_digest {
        // On demand, 20 s before the end: the window straddles the synthetic fault.
        let at = case.last_ns().saturating_sub(20_000_000_000);
        let mut targets: Vec<&String> = case.batches.iter().map(|(t, _)| t).collect();
        targets.sort();
        targets.dedup();
        for t in targets {
            if let Ok(Some(r)) = host.trigger(t, at) {
                digest(&mut h, &[r]);
            }
        }
    }
    let fin = host.finish().unwrap_or_default();
    digest(&mut h, &fin);
    RunOut {
        elapsed,
        state,
        digest: h,
    }
}

/// Reads every event of `batch`, so that its lines are in cache when it is fed.
fn warm_up(batch: &[SyscallEvent]) {
    let sum = batch.iter().fold(0u64, |s, e| {
        s.wrapping_add(e.ts_ns ^ e.duration_ns ^ u64::from(e.tid))
    });
    black_box(sum);
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
}

fn new_wasm_host() -> WasmHost {
    let telemetry = Arc::new(Telemetry::default());
    let config = HostConfig {
        call_timeout_ms: if std::env::var_os("FL_BENCH_NO_DEADLINE").is_some() {
            None
        } else {
            HostConfig::default().call_timeout_ms
        },
        timeout_mechanism: if std::env::var_os("FL_BENCH_EPOCH").is_some() {
            TimeoutMechanism::Epoch
        } else {
            TimeoutMechanism::Fence
        },
        huge_pages: std::env::var_os("FL_BENCH_NO_HUGE_PAGES").is_none(),
        ..HostConfig::default()
    };
    match WasmHost::new(&config, Params::default(), telemetry) {
        Ok(h) => h,
        Err(e) => panic!("cannot start the WASM host: {e}"),
    }
}

fn new_native_host() -> NativeHost {
    match NativeHost::new(
        Params::default(),
        std::env::var_os("FL_BENCH_NO_HUGE_PAGES").is_none(),
    ) {
        Ok(h) => h,
        Err(e) => panic!("cannot start the native host: {e}"),
    }
}

/// Median events/s over the repetitions (fresh engines), the state estimate, the digest.
///
/// Every repetition gets a fresh engine in memory already faulted in: the native engine
/// allocates from the process heap, which keeps the pages of the engine dropped before;
/// the WASM engine is re-created inside one guest ([`WasmHost::reset_engine`]), whose
/// allocator does the same. With a fresh instance per repetition instead
/// (`FL_BENCH_COLD_WASM=1`) only the guest would pay first-touch page faults on every
/// repetition.
fn measure(wasm: bool, case: &Case) -> (f64, usize, Option<u64>) {
    let mut rates = Vec::new();
    let mut state = 0;
    let mut dig = None;
    let reps = if quick() { 1 } else { reps() };
    let cold_wasm = std::env::var_os("FL_BENCH_COLD_WASM").is_some();
    let mut guest: Option<WasmHost> = None;
    for r in 0..reps {
        let mut native;
        let host: &mut dyn EngineHost = if wasm {
            match guest.as_mut() {
                Some(g) if !cold_wasm => {
                    if let Err(e) = g.reset_engine() {
                        panic!("cannot reset the WASM engine: {e}");
                    }
                    g
                }
                _ => guest.insert(new_wasm_host()),
            }
        } else {
            native = new_native_host();
            &mut native
        };
        // The last run also hashes the reports (outside the timed spans): with more than
        // one repetition, a reset engine's.
        let out = run(host, case, r + 1 == reps && digest_wanted());
        rates.push(case.events as f64 / out.elapsed.as_secs_f64());
        state = out.state;
        if r + 1 == reps && digest_wanted() {
            dig = Some(out.digest);
        }
    }
    (median(rates), state, dig)
}

fn quick() -> bool {
    std::env::var_os(QUICK_ENV).is_some()
}

fn reps() -> usize {
    std::env::var("FL_BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(REPS)
}

fn digest_wanted() -> bool {
    std::env::var_os("FL_BENCH_DIGEST").is_some()
}

/// Whether `FL_BENCH_CASES` (comma-separated, case-insensitive) selects `name`.
fn case_wanted(name: &str) -> bool {
    match std::env::var("FL_BENCH_CASES") {
        Ok(list) => list.split(',').any(|c| c.trim().eq_ignore_ascii_case(name)),
        Err(_) => true,
    }
}

/// Whether `FL_BENCH_HOSTS` selects this hosting (both by default).
fn host_wanted(wasm: bool) -> bool {
    match std::env::var("FL_BENCH_HOSTS") {
        Ok(h) => h.contains(if wasm { "wasm" } else { "native" }),
        Err(_) => true,
    }
}

/// Encode and decode of the WASM batch layout alone, natively (events/s each): the
/// ABI's share of a WASM call.
fn codec_rates(case: &Case) -> (f64, f64) {
    use faultline_engine::abi::batch::{decode_batch, encode_batch};
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let (mut enc, mut dec) = (Duration::ZERO, Duration::ZERO);
    for (target, chunk) in &case.batches {
        let t = Instant::now();
        if encode_batch(target, chunk, &mut buf).is_err() {
            return (f64::NAN, f64::NAN);
        }
        enc += t.elapsed();
        let t = Instant::now();
        black_box(decode_batch(&buf, &mut out).ok());
        dec += t.elapsed();
    }
    let n = case.events as f64;
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
    let mut host: Box<dyn EngineHost> = if kind == "wasm" {
        Box::new(new_wasm_host())
    } else {
        Box::new(new_native_host())
    };
    let mut batch = Vec::with_capacity(BATCH);
    let mut stream = generate(&spec(10_000, EventShape::Complete, false));
    loop {
        batch.clear();
        batch.extend(stream.by_ref().take(BATCH));
        if batch.is_empty() {
            break;
        }
        if let Err(e) = host.ingest(SYNTH_TARGET, &batch) {
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

/// The cases, generated lazily so a filtered run does not pay for the others.
fn cases() -> Vec<Box<dyn Fn() -> Option<Case>>> {
    let mut out: Vec<Box<dyn Fn() -> Option<Case>>> = Vec::new();
    for (threads, bursty) in [
        (100u32, false),
        (1_000u32, false),
        (2_000, false),
        (4_000, false),
        (10_000, false),
        (10_000, true),
    ] {
        for shape in [EventShape::Complete, EventShape::EnterExit] {
            let name = format!(
                "{threads}/{shape:?}/{}",
                if bursty { "bursty" } else { "uniform" }
            );
            if case_wanted(&name) {
                out.push(Box::new(move || Some(Case::synth(threads, shape, bursty))));
            }
        }
    }
    if case_wanted("real") {
        out.push(Box::new(Case::real));
    }
    if case_wanted("lttng") {
        out.push(Box::new(Case::real_lttng));
    }
    out
}

fn fmt_rate(r: Option<f64>) -> String {
    r.map_or("-".into(), |r| format!("{:.2}", r / 1e6))
}

fn fmt_mib(s: Option<usize>) -> String {
    s.map_or("-".into(), |s| format!("{:.1}", s as f64 / MIB))
}

fn main() {
    if let Ok(kind) = std::env::var(RSS_CHILD_ENV) {
        rss_child(&kind);
        return;
    }
    // `cargo bench` passes `--bench`; cases are chosen with `FL_BENCH_CASES`.
    let wall = Instant::now();
    println!(
        "engine throughput: batches of {BATCH}, median of {}, one core (thread CPU time)",
        reps()
    );
    println!();
    println!("| threads | shape | interleaving | local | events | native M ev/s | wasm M ev/s | wasm/native | native state MiB | wasm state MiB |");
    println!("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|");
    // Worst cases over the uniform streams, and over the realistic ones (bursty and real).
    let mut worst_native = [f64::MAX; 2];
    let mut worst_ratio = [f64::MAX; 2];
    let mut state_10k = 0usize;
    let mut codec = (f64::NAN, f64::NAN);
    let mut digests = Vec::new();
    for make in cases() {
        let Some(case) = make() else {
            println!(
                "| real | SKIPPED: {} or {} unreadable | | | | | | | | |",
                real_trace().display(),
                real_lttng().display()
            );
            continue;
        };
        if codec.0.is_nan() {
            codec = codec_rates(&case);
        }
        let native = host_wanted(false).then(|| measure(false, &case));
        let wasm = host_wanted(true).then(|| measure(true, &case));
        let ratio = match (&native, &wasm) {
            (Some(n), Some(w)) => Some(w.0 / n.0),
            _ => None,
        };
        let kind = usize::from(case.interleaving != "uniform");
        if let (Some(n), Some(w)) = (&native, worst_native.get_mut(kind)) {
            *w = w.min(n.0);
        }
        if let (Some(r), Some(w)) = (ratio, worst_ratio.get_mut(kind)) {
            *w = w.min(r);
        }
        if case.threads == "10000" {
            for s in [native.as_ref().map(|n| n.1), wasm.as_ref().map(|w| w.1)]
                .into_iter()
                .flatten()
            {
                state_10k = state_10k.max(s);
            }
        }
        println!(
            "| {} | {} | {} | {:.2} | {} | {} | {} | {} | {} | {} |",
            case.threads,
            case.shape,
            case.interleaving,
            case.locality,
            case.events,
            fmt_rate(native.as_ref().map(|n| n.0)),
            fmt_rate(wasm.as_ref().map(|w| w.0)),
            ratio.map_or("-".into(), |r| format!("{r:.2}")),
            fmt_mib(native.as_ref().map(|n| n.1)),
            fmt_mib(wasm.as_ref().map(|w| w.1)),
        );
        for (host, m) in [("native", &native), ("wasm", &wasm)] {
            if let Some((_, _, Some(d))) = m {
                digests.push(format!("{} {host}: {d:016x}", case.name));
            }
        }
        if quick() {
            break;
        }
    }
    println!();
    println!(
        "ABI batch codec alone (native): encode {:.1} M events/s, decode {:.1} M events/s",
        codec.0 / 1e6,
        codec.1 / 1e6
    );
    if !digests.is_empty() {
        println!();
        println!("report digests (equal before/after an optimisation, and native = wasm):");
        for d in &digests {
            println!("  {d}");
        }
    }
    if quick() || std::env::var_os("FL_BENCH_CASES").is_some() {
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
    // A target no selected case measured (one hosting, or no 10,000-thread case) has
    // no verdict: the worst of nothing is not a pass.
    let verdict = |measured: bool, ok: bool| match (measured, ok) {
        (false, _) => "not measured",
        (true, true) => "PASS",
        (true, false) => "FAIL",
    };
    println!("| target | measured | |");
    println!("|---|---:|---|");
    for (kind, what) in ["uniform streams", "bursty streams and the real trace"]
        .iter()
        .enumerate()
    {
        let (n, r) = (worst_native[kind], worst_ratio[kind]);
        let (has_n, has_r) = (n < f64::MAX, r < f64::MAX);
        println!(
            "| native ≥ 10 M events/s (worst of the {what}) | {} | {} |",
            if has_n {
                format!("{:.2} M", n / 1e6)
            } else {
                "-".into()
            },
            verdict(has_n, n >= 10e6)
        );
        println!(
            "| wasm ≥ 0.7× native (worst of the {what}) | {} | {} |",
            if has_r { format!("{r:.2}") } else { "-".into() },
            verdict(has_r, r >= 0.7)
        );
    }
    println!(
        "| state ≤ 64 MiB at 10,000 threads | {:.1} MiB | {} |",
        state_10k as f64 / MIB,
        verdict(state_10k > 0, state_10k as f64 <= 64.0 * MIB)
    );
    println!();
    println!("total bench time {:.1} s", wall.elapsed().as_secs_f64());
}
