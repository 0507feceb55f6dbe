//! The engine behaves the same linked natively and inside wasmtime, and a trapping guest
//! is restarted without taking the host down.
#![cfg(feature = "wasm")]

use std::sync::Arc;

use faultline::engine_host::{
    EngineHost, EngineKind, HostConfig, HostError, NativeHost, TimeoutMechanism, WasmHost,
};
use faultline::pipeline::telemetry::{GuestGauges, Telemetry, TrapReason};
use faultline_engine::synth::{generate, EventShape, FaultScope, FaultSpec, StreamSpec};
use faultline_engine::{EventKind, Params, PerfCounters, Stillness, SyscallEvent};
use serde_json::{json, Value};

const BATCH: usize = 4096;

/// Serializes the tests that allocate hundreds of MiB or count huge pages: run side by
/// side, one's allocations can make the kernel refuse the other's collapses.
fn heavy() -> std::sync::MutexGuard<'static, ()> {
    static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}

fn stream(threads: u32, shape: EventShape, fault: FaultSpec) -> Vec<SyscallEvent> {
    let mut events: Vec<SyscallEvent> = generate(&StreamSpec {
        threads,
        seconds: 30.0,
        calls_per_thread_per_second: 2560.0 / f64::from(threads),
        seed: 11,
        shape,
        fault: Some(fault),
        ..StreamSpec::default()
    })
    .collect();
    // Counters on some completed calls, so the batches' perf blocks (written in the same
    // pass as the records) cross the sandbox too.
    for (i, e) in events.iter_mut().enumerate() {
        if i % 7 == 3 && e.kind == EventKind::Complete {
            e.perf = Some(PerfCounters {
                cycles: e.duration_ns * 3,
                instructions: e.duration_ns * (1 + i as u64 % 4),
                cache_misses: e.duration_ns / 50,
                context_switches: u64::from(i % 11 == 0),
            });
        }
    }
    // And counters records (kind 6) between the calls: every thread's, plus a spinner's
    // (a thread of its own, 3 cycles per ns, almost no misses), so reports list threads.
    let mut out = Vec::with_capacity(events.len() + events.len() / 50);
    let mut spun_to = events.first().map_or(0, |e| e.ts_ns);
    let first = spun_to;
    let mut segments_at = spun_to;
    for (i, e) in events.into_iter().enumerate() {
        let ts = e.ts_ns;
        out.push(e);
        // Scheduler records (kinds 3 and 4) of the call's thread: runs, and switches away
        // preempted, asleep and blocked uninterruptibly, to the idle task or another.
        if i % 13 == 5 {
            out.push(SyscallEvent::on_cpu(e.pid, e.tid, ts, 100_000));
            let off = SyscallEvent::off_cpu_to(e.pid, e.tid, ts, i % 3 == 0, (i % 5) as u32);
            out.push(if i % 3 == 1 {
                off.uninterruptible()
            } else {
                off
            });
        }
        if i % 97 == 0 {
            let p = PerfCounters {
                cycles: 2_000_000 + i as u64 % 1_000,
                instructions: 3_000_000,
                cache_misses: 20_000,
                context_switches: 1,
            };
            out.push(SyscallEvent::counters(e.pid, e.tid, ts, 1_000_000, p));
        }
        if ts >= spun_to + 10_000_000 {
            let ns = ts - spun_to;
            let p = PerfCounters {
                cycles: 3 * ns,
                instructions: 6 * ns,
                cache_misses: ns / 1_000,
                context_switches: 0,
            };
            out.push(SyscallEvent::counters(e.pid, 999_999, ts, ns, p));
            spun_to = ts;
        }
        // And the network namespace's TCP segments (kind 7) once a second, their
        // retransmitted share rising in the second half (packet loss).
        if ts >= segments_at + 1_000_000_000 {
            segments_at = ts;
            let second = (ts - first) / 1_000_000_000;
            out.push(SyscallEvent::tcp_segments(
                e.pid,
                ts,
                1_000,
                1 + second * second,
            ));
        }
    }
    out
}

/// Everything observable from one host on one stream, serialized for comparison.
fn transcript(host: &mut dyn EngineHost, events: &[SyscallEvent], fault_at_ns: u64) -> Value {
    let mut steps = Vec::new();
    let tuned = Params {
        alpha_seconds: 0.7,
        ..Params::default()
    };
    host.set_target_params("tuned", tuned).unwrap();
    let mut triggered = false;
    for chunk in events.chunks(BATCH) {
        host.ingest("db", chunk).unwrap();
        host.ingest("tuned", chunk).unwrap();
        let reports = host.take_reports().unwrap();
        if !reports.is_empty() {
            steps.push(json!({ "reports": reports }));
        }
        let last = chunk.last().map_or(0, |e| e.ts_ns);
        if !triggered && last > fault_at_ns + 5_000_000_000 {
            triggered = true;
            let r = host.trigger("db", fault_at_ns).unwrap();
            steps.push(json!({ "trigger": r }));
        }
    }
    assert!(triggered, "the stream reaches past the fault");
    // Its own parameters dropped (another host's target evicted): it runs on the
    // engine's again; an unknown name is no error.
    host.clear_target_params("tuned").unwrap();
    host.clear_target_params("never-set").unwrap();
    let untuned = host
        .trigger("tuned", fault_at_ns)
        .unwrap()
        .expect("a report");
    assert_eq!(
        untuned.parameters.alpha_seconds,
        Params::default().alpha_seconds
    );
    steps.push(json!({ "untuned": untuned }));
    let cal = host.calibrate("db", Some(fault_at_ns)).unwrap();
    let counters = host.counters().unwrap();
    assert!(host.state_bytes().unwrap() > 0);
    let fin = host.finish().unwrap();
    // The target falls silent: its host moves its clock on, and the cadence goes on.
    let end = events.last().map_or(0, |e| e.ts_ns);
    host.advance("nobody", end + 1, Stillness::Unknown).unwrap();
    let mut silent = Vec::new();
    // Both readings of the processes cross the ABI (the last reports say which).
    for (s, still) in [
        (12, Stillness::Unknown),
        (25, Stillness::Asleep),
        (37, Stillness::Asleep),
    ] {
        host.advance("db", end + s * 1_000_000_000, still).unwrap();
        silent.extend(host.take_reports().unwrap());
    }
    let last = silent.last().expect("cadence reports while silent");
    assert!(last.silent_seconds > 20.0, "{}", last.silent_seconds);
    steps.push(json!({ "silent_after_the_end": silent }));
    // An evicted target is forgotten across the ABI (an unknown one is no error): its
    // state goes, and its name starts afresh.
    host.forget("nobody").unwrap();
    let before = host.state_bytes().unwrap();
    host.forget("tuned").unwrap();
    let after = host.state_bytes().unwrap();
    assert!(after < before, "{after} < {before}");
    let forgotten = host.trigger("tuned", end).unwrap();
    assert!(forgotten.is_none(), "no state left");
    let first = &events[..BATCH.min(events.len())];
    host.ingest("tuned", first).unwrap();
    let at = first.last().map_or(0, |e| e.ts_ns);
    let fresh = host.trigger("tuned", at).unwrap();
    assert!(fresh.is_some(), "a fresh target");
    steps.push(json!({ "forgotten": forgotten, "fresh": fresh }));
    json!({ "steps": steps, "calibration": cal, "counters": counters, "finish": fin })
}

/// The path and values of the first difference between two JSON documents.
fn first_difference(path: &str, a: &Value, b: &Value) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter().find_map(|k| {
                let (va, vb) = (
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                );
                first_difference(&format!("{path}.{k}"), va, vb)
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (va, vb))| first_difference(&format!("{path}[{i}]"), va, vb)),
        _ if a == b => None,
        _ => Some(format!("{path}: native {a} vs wasm {b}")),
    }
}

/// Runs the stream through both hosts; returns the lines the guest had prefetched.
fn compare(threads: u32, shape: EventShape, fault: FaultSpec) -> u64 {
    let start_ns = StreamSpec::default().start_ns;
    let fault_at = start_ns + (fault.start_seconds * 1e9) as u64;
    let events = stream(threads, shape, fault);
    assert!(events.len() > 50_000);
    let telemetry = Arc::new(Telemetry::default());
    let mut native = NativeHost::new(Params::default(), true).unwrap();
    let mut wasm =
        WasmHost::new(&HostConfig::default(), Params::default(), telemetry.clone()).unwrap();
    assert_eq!(
        (native.kind(), wasm.kind()),
        (EngineKind::Native, EngineKind::Wasm)
    );
    let a = transcript(&mut native, &events, fault_at);
    let b = transcript(&mut wasm, &events, fault_at);
    // Both engines saw every event of both targets.
    assert_eq!(a["counters"]["events"], json!(2 * events.len()));
    // The comparison covers real reports, not just empty lists, with vital signs that
    // name the spinner.
    assert!(a["finish"].as_array().is_some_and(|r| !r.is_empty()));
    let spinner = &a["finish"][0]["vital_signs"]["threads"][0];
    assert_eq!(
        spinner["tid"],
        json!(999_999),
        "{}",
        a["finish"][0]["vital_signs"]
    );
    assert_eq!(spinner["symptoms"], json!(["busy_loop"]));
    // Uninterruptible switches between calls crossed the sandbox as page waits (only
    // halves say a thread is between calls).
    if shape == EventShape::EnterExit {
        assert!(
            a["counters"]["page_wait_records"].as_u64() > Some(0),
            "{}",
            a["counters"]
        );
    }
    // FL_DUMP=<dir> writes both transcripts, to diff them when this test fails.
    if let Ok(dir) = std::env::var("FL_DUMP") {
        std::fs::write(
            format!("{dir}/native-{shape:?}.json"),
            serde_json::to_vec_pretty(&a).unwrap(),
        )
        .unwrap();
        std::fs::write(
            format!("{dir}/wasm-{shape:?}.json"),
            serde_json::to_vec_pretty(&b).unwrap(),
        )
        .unwrap();
    }
    if let Some(d) = first_difference("$", &a, &b) {
        panic!("native and WASM hosts disagree at {d}");
    }
    assert_eq!(
        (telemetry.guest_traps(), telemetry.guest_restarts()),
        (0, 0)
    );
    wasm.prefetched_lines()
}

/// A slowdown of almost every thread at once, 15 s in.
fn environment_fault() -> FaultSpec {
    FaultSpec {
        start_seconds: 15.0,
        affected_fraction: 0.95,
        onset_spread_seconds: 0.2,
        duration_multiplier: 8.0,
        rate_multiplier: 1.0,
        scope: FaultScope::AllSyscalls,
    }
}

#[test]
fn native_and_wasm_agree_on_an_environment_fault_complete_shape() {
    // With a few dozen threads the state stays in cache: no hints.
    assert_eq!(compare(32, EventShape::Complete, environment_fault()), 0);
}

#[test]
fn native_and_wasm_agree_on_a_software_fault_enter_exit_shape() {
    compare(
        32,
        EventShape::EnterExit,
        FaultSpec {
            start_seconds: 15.0,
            affected_fraction: 0.1,
            onset_spread_seconds: 8.0,
            duration_multiplier: 6.0,
            rate_multiplier: 3.0,
            scope: FaultScope::AllSyscalls,
        },
    );
}

/// Thousands of threads, each event of another thread than the one before: the native
/// engine prefetches a few events ahead, the guest has its host prefetch each group of
/// events (`Target::hint_group`, from 1,500 threads when every event changes thread); neither may change a result.
#[test]
fn native_and_wasm_agree_with_thousands_of_interleaved_threads() {
    let lines = compare(2_500, EventShape::Complete, environment_fault());
    // Several lines for each of the stream's 76,800 events: the hints did reach the host.
    assert!(lines > 300_000, "{lines} lines prefetched");
}

/// A reset engine starts from nothing (the same answers as a fresh guest) but in the
/// guest's memory, which therefore does not grow by another state's worth.
#[test]
fn a_reset_engine_answers_like_a_fresh_one_in_the_same_memory() {
    let fault = environment_fault();
    let start_ns = StreamSpec::default().start_ns;
    let fault_at = start_ns + (fault.start_seconds * 1e9) as u64;
    let events = stream(300, EventShape::Complete, fault);
    let telemetry = Arc::new(Telemetry::default());
    let mut host =
        WasmHost::new(&HostConfig::default(), Params::default(), telemetry.clone()).unwrap();
    let first = transcript(&mut host, &events, fault_at);
    let memory = host.guest_memory_bytes();

    host.reset_engine().unwrap();
    assert_eq!(host.counters().unwrap().events, 0, "the state is gone");
    let second = transcript(&mut host, &events, fault_at);
    if let Some(d) = first_difference("$", &first, &second) {
        panic!("a reset engine answers differently at {d}");
    }
    // The allocator refills its freed chunks in another order than it first carved
    // them, so a page (64 KiB) or two more is fragmentation, not a second state (which
    // would double the memory).
    let after = host.guest_memory_bytes();
    assert!(
        after <= memory + memory / 16,
        "the guest's memory was not reused: {memory} bytes, then {after}"
    );
    assert_eq!(
        (telemetry.guest_traps(), telemetry.guest_restarts()),
        (0, 0)
    );
}

#[test]
fn a_trapping_guest_is_restarted_and_keeps_serving() {
    let telemetry = Arc::new(Telemetry::default());
    let config = HostConfig {
        memory_limit_bytes: 16 << 20,
        ..HostConfig::default()
    };
    let mut host = WasmHost::new(&config, Params::default(), telemetry.clone()).unwrap();
    let small: Vec<SyscallEvent> = generate(&StreamSpec {
        threads: 8,
        seconds: 1.0,
        ..StreamSpec::default()
    })
    .collect();
    host.ingest("db", &small).unwrap();
    assert!(host.guest_memory_bytes() <= 16 << 20);

    // A batch larger than the guest's memory limit: copying it in must trap, not abort.
    let huge: Vec<SyscallEvent> = small.iter().copied().cycle().take(500_000).collect();
    let err = host.ingest("db", &huge).unwrap_err();
    assert!(
        matches!(err, HostError::Trap { call: "ingest", .. }),
        "{err}"
    );
    assert_eq!(telemetry.guest_traps(), 1);
    assert_eq!(telemetry.guest_traps_by(TrapReason::MemoryLimit), 1);
    assert_eq!(telemetry.guest_restarts(), 1);
    assert_eq!(telemetry.guest_restart_failures(), 0);

    // The restarted guest serves the next calls, from a clean state.
    host.ingest("db", &small).unwrap();
    let c = host.counters().unwrap();
    assert_eq!(c.events, small.len() as u64);
    host.finish().unwrap();
    assert_eq!(telemetry.guest_traps(), 1);
}

/// The stream's continuous reports, on-demand diagnosis and final reports for `target`.
fn tuned_transcript(
    host: &mut dyn EngineHost,
    target: &str,
    events: &[SyscallEvent],
    fault_at_ns: u64,
) -> Value {
    let mut reports = Vec::new();
    for chunk in events.chunks(BATCH) {
        host.ingest(target, chunk).unwrap();
        reports.extend(host.take_reports().unwrap());
    }
    let trigger = host.trigger(target, fault_at_ns).unwrap();
    let fin = host.finish().unwrap();
    json!({ "reports": reports, "trigger": trigger, "finish": fin })
}

/// Per-target parameters outlive a trap: the restarted guest is given them again, so the
/// target's reports are those of a fresh guest given the same parameters, not defaults.
#[test]
fn a_restarted_guest_keeps_the_per_target_parameters() {
    let fault = environment_fault();
    let fault_at = StreamSpec::default().start_ns + (fault.start_seconds * 1e9) as u64;
    let events = stream(16, EventShape::Complete, fault);
    let config = HostConfig {
        memory_limit_bytes: 16 << 20,
        ..HostConfig::default()
    };
    let tuned = Params {
        alpha_seconds: 1.0,
        window_seconds: 30.0,
        cadence_seconds: 4.0,
        min_active_calls: 150,
        ..Params::default()
    };

    let telemetry = Arc::new(Telemetry::default());
    let mut restarted = WasmHost::new(&config, Params::default(), telemetry.clone()).unwrap();
    restarted.set_target_params("tuned", tuned.clone()).unwrap();
    // A batch larger than the guest's memory limit traps it.
    let huge: Vec<SyscallEvent> = events.iter().copied().cycle().take(500_000).collect();
    let err = restarted.ingest("tuned", &huge).unwrap_err();
    assert!(
        matches!(err, HostError::Trap { call: "ingest", .. }),
        "{err}"
    );
    assert_eq!(
        (telemetry.guest_traps(), telemetry.guest_restarts()),
        (1, 1)
    );
    let after_trap = tuned_transcript(&mut restarted, "tuned", &events, fault_at);
    assert_eq!(
        telemetry.guest_traps(),
        1,
        "the stream itself fits the guest"
    );

    let mut fresh = WasmHost::new(&config, Params::default(), Arc::default()).unwrap();
    fresh.set_target_params("tuned", tuned.clone()).unwrap();
    let expected = tuned_transcript(&mut fresh, "tuned", &events, fault_at);

    // The comparison covers real reports, made with the tuned parameters.
    let reports = expected["reports"].as_array().unwrap();
    assert!(reports.len() >= 3, "{} continuous reports", reports.len());
    assert!(expected["trigger"].is_object(), "an on-demand report");
    let echoed = serde_json::to_value(&tuned).unwrap();
    assert!(reports.iter().all(|r| r["parameters"] == echoed));
    if let Some(d) = first_difference("$", &expected, &after_trap) {
        panic!("the restarted guest answers unlike a fresh one at {d}");
    }
    // And the parameters change the answers, not only their echo.
    let mut defaults = WasmHost::new(&config, Params::default(), Arc::default()).unwrap();
    let untuned = tuned_transcript(&mut defaults, "tuned", &events, fault_at);
    let strip = |v: &Value| {
        let mut v = v.clone();
        for r in v["reports"].as_array_mut().into_iter().flatten() {
            r["parameters"] = Value::Null;
        }
        v
    };
    assert_ne!(strip(&untuned), strip(&expected));
}

/// A reset whose fresh engine cannot be made in the guest leaves no half-reset guest
/// behind: the guest is dropped, shown down, and the next call serves from a fresh one.
/// What fails is real: the reset drops every target's state inside the guest, under the
/// same fuel budget as any call, and the state of thousands of threads costs more fuel to
/// free than any one batch costs to ingest (measured: 8.7 M against at most 0.9 M; fuel
/// is counted, not timed, so this fails the same way on every run).
#[test]
fn a_reset_that_fails_in_the_guest_drops_it_and_the_next_call_restarts_it() {
    let _alone = heavy();
    let config = HostConfig {
        fuel_per_call: Some(2_800_000),
        ..HostConfig::default()
    };
    // A target's first batch allocates its overflow sketch: a small one keeps that batch
    // (the dearest) well within the budget.
    let params = Params {
        sketch_width: 1 << 8,
        ..Params::default()
    };
    let telemetry = Arc::new(Telemetry::default());
    let mut host = WasmHost::new(&config, params, telemetry.clone()).unwrap();
    let events: Vec<SyscallEvent> = generate(&StreamSpec {
        threads: 5_000,
        seconds: 1.0,
        ..StreamSpec::default()
    })
    .collect();
    let targets = ["a", "b", "c", "d"];
    for chunk in events.chunks(64) {
        for t in targets {
            host.ingest(t, chunk).unwrap();
        }
    }
    assert_eq!(
        host.counters().unwrap().events,
        (targets.len() * events.len()) as u64
    );
    assert!(!telemetry.guest_unavailable());

    let err = host.reset_engine().unwrap_err();
    assert!(
        matches!(&err, HostError::Unavailable(m) if m.contains("guest init failed")),
        "{err}"
    );
    assert!(telemetry.guest_unavailable(), "shown down");
    assert_eq!(host.guest_memory_bytes(), 0, "the guest was dropped");
    assert_eq!(
        (telemetry.guest_traps(), telemetry.guest_restarts()),
        (0, 0)
    );
    // A reset without a guest has nothing to do.
    host.reset_engine().unwrap();
    assert_eq!(telemetry.guest_restarts(), 0);

    // The next call starts a fresh guest, with an empty state, at once (no backoff: no
    // restart failed).
    assert_eq!(host.counters().unwrap().events, 0);
    assert_eq!(
        (
            telemetry.guest_restarts(),
            telemetry.guest_restart_failures()
        ),
        (1, 0)
    );
    assert!(!telemetry.guest_unavailable());
    host.ingest("a", &events[..64]).unwrap();
    assert_eq!(host.counters().unwrap().events, 64);
}

#[test]
fn a_call_past_its_timeout_is_stopped_and_the_guest_restarted() {
    let _alone = heavy();
    let small: Vec<SyscallEvent> = generate(&StreamSpec {
        threads: 8,
        seconds: 1.0,
        ..StreamSpec::default()
    })
    .collect();
    // 1.5 million events over 10,000 threads: over 200 ms in the guest even on a fast
    // machine, well past a 100 ms budget and the deadline's 10 ms resolution. The budget
    // leaves room for a restart's instantiation in an unoptimized test build.
    let long: Vec<SyscallEvent> = generate(&StreamSpec {
        threads: 10_000,
        seconds: 10.0,
        calls_per_thread_per_second: 20.0,
        ..StreamSpec::default()
    })
    .take(1_500_000)
    .collect();
    assert_eq!(long.len(), 1_500_000);
    for mechanism in [TimeoutMechanism::Fence, TimeoutMechanism::Epoch] {
        let telemetry = Arc::new(Telemetry::default());
        let config = HostConfig {
            memory_limit_bytes: 1 << 30,
            call_timeout_ms: Some(100),
            timeout_mechanism: mechanism,
            ..HostConfig::default()
        };
        let mut host = WasmHost::new(&config, Params::default(), telemetry.clone()).unwrap();
        host.ingest("db", &small).unwrap();
        assert_eq!(telemetry.guest_traps(), 0, "{mechanism:?}");

        let t0 = std::time::Instant::now();
        let err = host.ingest("db", &long).unwrap_err();
        let took = t0.elapsed();
        let HostError::Trap { call, message } = &err else {
            panic!("{mechanism:?}: {err}");
        };
        assert_eq!(*call, "ingest");
        if mechanism == TimeoutMechanism::Fence {
            assert!(message.contains("call_timeout_ms"), "{message}");
        }
        assert_eq!(telemetry.guest_traps(), 1, "{mechanism:?}");
        assert_eq!(
            telemetry.guest_traps_by(TrapReason::Timeout),
            1,
            "{mechanism:?}"
        );
        assert_eq!(telemetry.guest_restarts(), 1, "{mechanism:?}");
        assert!(
            took < std::time::Duration::from_secs(20),
            "{mechanism:?}: {took:?}"
        );

        // The restarted guest serves the next calls, from a clean state. Under the same
        // 100 ms budget: a small batch takes milliseconds, but a loaded machine may pause
        // this thread past the budget, and that call then traps as a timeout too (and the
        // guest restarts again: `traps` and `restarts` move together). Such a trap says
        // nothing about the restart, so it is tolerated, a few times; any other error, or
        // a clean success never coming, fails.
        let mut timeouts = 0;
        loop {
            match host.ingest("db", &small) {
                Ok(()) => break,
                Err(HostError::Trap { call: "ingest", .. })
                    if timeouts < 5
                        && telemetry.guest_traps_by(TrapReason::Timeout) == timeouts + 2 =>
                {
                    timeouts += 1;
                    eprintln!(
                        "{mechanism:?}: the small batch after the restart also ran past \
                         100 ms (machine loaded?); trying again ({timeouts})"
                    );
                }
                Err(e) => panic!("{mechanism:?}: the restarted guest failed: {e}"),
            }
        }
        assert_eq!(host.counters().unwrap().events, small.len() as u64);
        assert_eq!(telemetry.guest_traps(), 1 + timeouts, "{mechanism:?}");
        assert_eq!(telemetry.guest_restarts(), 1 + timeouts, "{mechanism:?}");
        assert_eq!(telemetry.guest_restart_failures(), 0, "{mechanism:?}");
    }
}

/// State that outgrows the memory limit (many threads in a small guest) traps as
/// `memory_limit`, not as a bug; the guest restarts and serves again.
#[test]
fn a_guest_whose_threads_outgrow_its_memory_traps_as_memory_limit() {
    // Alone: thousands of threads' allocations would disturb the huge-page test's heap.
    let _alone = heavy();
    let telemetry = Arc::new(Telemetry::default());
    let config = HostConfig {
        memory_limit_bytes: 16 << 20,
        ..HostConfig::default()
    };
    let mut host = WasmHost::new(&config, Params::default(), telemetry.clone()).unwrap();
    // 20,000 threads with 16 syscalls each: ~60 MiB of state at the engine's own bound
    // for that many channels, far past 16 MiB.
    let events: Vec<SyscallEvent> = generate(&StreamSpec {
        threads: 20_000,
        syscall_types: 16,
        seconds: 0.5,
        calls_per_thread_per_second: 64.0,
        seed: 5,
        ..StreamSpec::default()
    })
    .collect();
    let mut trapped = None;
    for (i, batch) in events.chunks(BATCH).enumerate() {
        if let Err(e) = host.ingest("big", batch) {
            trapped = Some((i, e));
            break;
        }
        let g = telemetry.guest().expect("a WASM host exports guest gauges");
        assert!(g.memory_bytes <= 16 << 20, "{g:?}");
    }
    let (i, err) = trapped.expect("20,000 threads cannot fit in 16 MiB");
    assert!(
        matches!(err, HostError::Trap { call: "ingest", .. }),
        "batch {i}: {err}"
    );
    assert_eq!(
        telemetry.guest_traps_by(TrapReason::MemoryLimit),
        1,
        "{err}"
    );
    assert_eq!(telemetry.guest_traps(), 1);
    assert_eq!(telemetry.guest_restarts(), 1);
    // The fresh guest is small again, and serves.
    let g = telemetry.guest().unwrap();
    assert!(g.up && g.memory_bytes < 16 << 20, "{g:?}");
    host.ingest("big", &events[..BATCH]).unwrap();
}

/// The guest gauges follow the guest's memory after each call, next to its limit.
#[test]
fn the_guest_memory_gauges_follow_the_guest() {
    // Alone: thousands of threads' allocations would disturb the huge-page test's heap.
    let _alone = heavy();
    let telemetry = Arc::new(Telemetry::default());
    let native = HostConfig {
        kind: EngineKind::Native,
        ..HostConfig::default()
    };
    let mut native =
        faultline::engine_host::build_host(&native, Params::default(), telemetry.clone()).unwrap();
    let events = stream(2_000, EventShape::Complete, environment_fault());
    native.ingest("db", &events[..BATCH]).unwrap();
    assert_eq!(
        telemetry.guest(),
        None,
        "the native engine has no guest gauges"
    );

    let config = HostConfig::default();
    let mut host = WasmHost::new(&config, Params::default(), telemetry.clone()).unwrap();
    let start = telemetry.guest().expect("gauges once the guest runs");
    assert_eq!(start.memory_limit_bytes, 512 << 20);
    assert!(start.up);
    assert!(start.memory_bytes > 0);
    for batch in events.chunks(BATCH) {
        host.ingest("db", batch).unwrap();
    }
    let fed = telemetry.guest().unwrap();
    assert_eq!(
        fed,
        GuestGauges {
            up: true,
            memory_bytes: host.guest_memory_bytes() as u64,
            memory_limit_bytes: 512 << 20,
        }
    );
    assert!(
        fed.memory_bytes > start.memory_bytes,
        "2,000 threads grew the memory: {start:?} → {fed:?}"
    );
    // The engine's own state fits in what the gauge shows.
    assert!(host.state_bytes().unwrap() as u64 <= fed.memory_bytes);
    drop(host);
    assert_eq!(telemetry.guest(), None, "gone with its host");
}

#[test]
fn invalid_settings_are_refused_up_front() {
    let telemetry = Arc::new(Telemetry::default());
    let bad = Params {
        alpha_seconds: -1.0,
        ..Params::default()
    };
    let err = WasmHost::new(&HostConfig::default(), bad.clone(), telemetry.clone()).unwrap_err();
    assert!(matches!(err, HostError::Params(ref p) if p.key == "alpha_seconds"));
    let mut host = WasmHost::new(&HostConfig::default(), Params::default(), telemetry).unwrap();
    assert!(matches!(
        host.set_target_params("db", bad),
        Err(HostError::Params(_))
    ));
    let cfg = HostConfig {
        memory_limit_bytes: 1,
        ..HostConfig::default()
    };
    assert!(matches!(
        faultline::engine_host::build_host(&cfg, Params::default(), Arc::new(Telemetry::default())),
        Err(HostError::Config(_))
    ));
}

/// Whether this kernel can collapse memory into transparent huge pages on request
/// (`MADV_COLLAPSE`, Linux 6.1+, THP not `never`).
fn can_collapse() -> bool {
    let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled");
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut v = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse::<u32>().ok());
    let (major, minor) = (v.next().unwrap_or(0), v.next().unwrap_or(0));
    mode.is_ok_and(|m| !m.contains("[never]")) && (major, minor) >= (6, 1)
}

/// The kilobytes of an `AnonHugePages:` line of `smaps`/`smaps_rollup`, if it is one.
fn anon_huge_kib_line(line: &str) -> Option<u64> {
    let v = line.strip_prefix("AnonHugePages:")?;
    v.trim().trim_end_matches("kB").trim().parse().ok()
}

/// Kilobytes of anonymous memory in huge pages in this process.
fn anon_huge_kib() -> u64 {
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    rollup.lines().find_map(anon_huge_kib_line).unwrap_or(0)
}

#[test]
fn the_guest_memory_is_handed_to_huge_pages_as_it_grows() {
    let _alone = heavy();
    const HUGE: u64 = 2 << 20;
    let events: Vec<SyscallEvent> = generate(&StreamSpec {
        threads: 3000,
        seconds: 4.0,
        seed: 5,
        ..StreamSpec::default()
    })
    .collect();
    let run = |huge_pages: bool| {
        let config = HostConfig {
            huge_pages,
            ..HostConfig::default()
        };
        let mut host =
            WasmHost::new(&config, Params::default(), Arc::new(Telemetry::default())).unwrap();
        for chunk in events.chunks(BATCH) {
            host.ingest("db", chunk).unwrap();
        }
        let memory = host.guest_memory_bytes() as u64;
        (host.huge_page_stats(), memory, host)
    };

    let (off, _, _) = run(false);
    assert_eq!(
        off,
        Default::default(),
        "huge_pages = false leaves the memory alone"
    );

    let (stats, memory, _host) = run(true);
    assert!(
        memory >= 4 * HUGE,
        "the stream should grow the guest's memory: {memory}"
    );
    // Every whole aligned range was handed over (only the two partial ends are not).
    let handled = stats.collapsed_bytes / HUGE + stats.refused_ranges;
    assert!(
        handled + 2 >= memory / HUGE,
        "{handled} of {} ranges handed over: {stats:?}",
        memory / HUGE
    );
    if can_collapse() {
        // Only the first range (the module's data image, mapped from a file) is refused.
        assert!(
            stats.collapsed_bytes + 2 * HUGE >= memory - HUGE,
            "{stats:?} for {memory} bytes"
        );
        let kib = anon_huge_kib();
        assert!(
            kib * 1024 >= stats.collapsed_bytes,
            "{kib} KiB in huge pages, {} bytes collapsed",
            stats.collapsed_bytes
        );
    } else {
        eprintln!("this kernel cannot collapse on request: only the hand-over was checked");
    }
}

/// Kilobytes in huge pages of the anonymous mapping holding `addr` (`/proc/self/smaps`).
fn anon_huge_kib_of_mapping_at(addr: usize) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let mut inside = false;
    for line in smaps.lines() {
        let range = line.split_ascii_whitespace().next().and_then(|r| {
            let (a, b) = r.split_once('-')?;
            Some((
                usize::from_str_radix(a, 16).ok()?,
                usize::from_str_radix(b, 16).ok()?,
            ))
        });
        if let Some((a, b)) = range {
            inside = a <= addr && addr < b;
        } else if inside {
            if let Some(kib) = anon_huge_kib_line(line) {
                return kib;
            }
        }
    }
    0
}

#[test]
fn the_native_engines_heap_is_handed_to_huge_pages_as_it_grows() {
    let _alone = heavy();
    const HUGE: u64 = 2 << 20;
    let events: Arc<Vec<SyscallEvent>> = Arc::new(
        generate(&StreamSpec {
            threads: 3000,
            seconds: 4.0,
            seed: 5,
            ..StreamSpec::default()
        })
        .collect(),
    );
    // On a thread of its own, as in the pipeline: the engine then allocates from that
    // thread's arena, not from the main heap.
    let run = |huge_pages: bool| {
        let events = Arc::clone(&events);
        std::thread::spawn(move || {
            let mut host = NativeHost::new(Params::default(), huge_pages).unwrap();
            for chunk in events.chunks(BATCH) {
                host.ingest("db", chunk).unwrap();
            }
            let state = host.state_bytes().unwrap() as u64;
            let probe = Box::new(0u64);
            let heap_huge_kib = anon_huge_kib_of_mapping_at(std::ptr::from_ref(&*probe) as usize);
            (host.huge_page_stats(), state, heap_huge_kib)
        })
        .join()
        .unwrap()
    };

    let (off, _, _) = run(false);
    assert_eq!(
        off,
        Default::default(),
        "huge_pages = false leaves the heap alone"
    );

    let (stats, state, heap_huge_kib) = run(true);
    eprintln!("state {state} bytes; {stats:?}; the heap holds {heap_huge_kib} KiB in huge pages");
    assert!(
        state >= 4 * HUGE,
        "the stream should build a large state: {state}"
    );
    let handled = stats.collapsed_bytes + stats.refused_ranges * HUGE;
    assert!(
        handled + 2 * HUGE >= state,
        "{handled} bytes handed over for {state} bytes of state: {stats:?}"
    );
    if can_collapse() {
        // The kernel may refuse a range (no free huge page at that moment, or heap
        // trimmed meanwhile: seen 2 of 8 in a clean-clone CI run); refusals are counted,
        // and most of the heap must still be collapsed.
        assert!(
            stats.refused_ranges * HUGE <= stats.collapsed_bytes,
            "most ranges should collapse: {stats:?}"
        );
        assert!(
            heap_huge_kib * 1024 + 2 * HUGE >= stats.collapsed_bytes,
            "{heap_huge_kib} KiB of the heap in huge pages, {} bytes collapsed",
            stats.collapsed_bytes
        );
    } else {
        eprintln!("this kernel cannot collapse on request: only the hand-over was checked");
    }
}

/// A target whose own batches keep trapping the real guest is quarantined after the third
/// trap: its fourth batch is dropped without a call (no fourth trap), and the other
/// target's data after it is analysed in one guest life, to a final report.
#[test]
fn a_target_whose_batches_keep_trapping_the_guest_is_quarantined() {
    use std::time::Duration;

    use faultline::config::PrometheusSinkConfig;
    use faultline::model::{EventBatch, ProcessInfo};
    use faultline::pipeline::engine_task::EngineTask;
    use faultline::pipeline::quarantine::TRAPS_TO_QUARANTINE;
    use faultline::pipeline::queue;
    use faultline::pipeline::router::Router;
    use faultline::pipeline::telemetry::DropReason;
    use faultline::sinks::prometheus;

    let _alone = heavy();
    let telemetry = Arc::new(Telemetry::default());
    let config = HostConfig {
        memory_limit_bytes: 16 << 20,
        ..HostConfig::default()
    };
    let host = WasmHost::new(&config, Params::default(), telemetry.clone()).unwrap();
    let (sink, exporter) = prometheus::new(&PrometheusSinkConfig::default(), telemetry.clone());
    let task = EngineTask::new(
        Box::new(host),
        Router::new(&[], 4),
        Vec::new(),
        vec![Box::new(sink)],
        telemetry.clone(),
        Duration::from_secs(5),
        Duration::from_secs(1),
    )
    .expect("task");
    let db: Vec<SyscallEvent> = generate(&StreamSpec {
        threads: 8,
        seconds: 40.0,
        ..StreamSpec::default()
    })
    .collect();
    // Larger than the guest's 16 MiB: copying it in traps, every time (as the test above).
    let poison: Vec<SyscallEvent> = db.iter().copied().cycle().take(500_000).collect();
    let batch = |comm: &str, events: &[SyscallEvent]| EventBatch {
        source: "perf",
        process: ProcessInfo {
            comm: Some(comm.into()),
            ..ProcessInfo::default()
        },
        events: events.to_vec(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let (tx, rx) = queue::bounded(2);
    let (_cmd_tx, cmd_rx) = tokio::sync::mpsc::channel(1);
    let handle = rt.handle().clone();
    let thread = std::thread::spawn(move || task.run(handle, rx, cmd_rx));
    for _ in 0..=TRAPS_TO_QUARANTINE {
        rt.block_on(tx.send(batch("poison", &poison)))
            .expect("queue open");
    }
    for part in db.chunks(BATCH) {
        rt.block_on(tx.send(batch("db", part))).expect("queue open");
    }
    drop(tx);
    let summary = thread.join().expect("engine thread");

    let perf = telemetry.source("perf");
    let traps = TRAPS_TO_QUARANTINE as u64;
    assert_eq!(
        telemetry.guest_traps(),
        traps,
        "no trap after the quarantine began"
    );
    assert_eq!(telemetry.guest_traps_by(TrapReason::MemoryLimit), traps);
    assert_eq!(
        perf.dropped(DropReason::EngineError),
        traps * poison.len() as u64
    );
    assert_eq!(perf.dropped(DropReason::Quarantined), poison.len() as u64);
    assert!(!summary.finish_failed, "{summary:?}");
    let text = exporter.encode().expect("encode");
    assert_eq!(
        sample(&text, "faultline_targets_quarantined"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "faultline_target_quarantines_total"),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "faultline_events_dropped_total{source=\"perf\",reason=\"quarantined\"}"
        ),
        Some(poison.len() as f64)
    );
    // db's events were all analysed by the last guest: its final report counts its 8
    // threads.
    assert_eq!(
        sample(&text, "faultline_threads{target=\"db\",state=\"total\"}"),
        Some(8.0),
        "{text}"
    );
}

/// The value of `series` (name and labels exactly as exported) in exposition `text`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(series)?;
        rest.strip_prefix(' ')?.trim().parse().ok()
    })
}
