//! Vital signs from counters records: a healthy target's counters raise no symptom, a
//! spinning thread among them is named a busy loop, and neither changes the verdict the
//! syscalls give (the counters describe, PerfCompass decides).

use faultline_engine::report::{Report, Verdict};
use faultline_engine::symptoms::Symptom;
use faultline_engine::synth::{generate, StreamSpec};
use faultline_engine::{Engine, Params, PerfCounters, SyscallEvent};

const SECOND: u64 = 1_000_000_000;

fn spec() -> StreamSpec {
    StreamSpec {
        threads: 16,
        syscall_types: 24,
        seconds: 60.0,
        calls_per_thread_per_second: 200.0,
        seed: 5,
        ..StreamSpec::default()
    }
}

/// The stream with a counters record per thread per second (a fifth of a 3 GHz core,
/// 1.5 instructions per cycle, 5 misses per thousand instructions, a switch every few
/// calls), and with `spinner`'s records for one extra thread flat out from `spin_from`
/// seconds on.
fn with_counters(spec: &StreamSpec, spin_from: Option<f64>) -> Vec<SyscallEvent> {
    let mut out = Vec::new();
    let mut next_second = spec.start_ns + SECOND;
    let spinner = spec.pid + spec.threads + 100;
    for e in generate(spec) {
        while e.ts_ns >= next_second {
            for tid in spec.pid..spec.pid + spec.threads {
                let healthy = PerfCounters {
                    cycles: 600_000_000,
                    instructions: 900_000_000,
                    cache_misses: 4_500_000,
                    context_switches: 60,
                };
                out.push(SyscallEvent::counters(
                    spec.pid,
                    tid,
                    next_second,
                    SECOND,
                    healthy,
                ));
            }
            let t = (next_second - spec.start_ns) as f64 / 1e9;
            if spin_from.is_some_and(|from| t > from) {
                let spin = PerfCounters {
                    cycles: 3 * SECOND,
                    instructions: 7 * SECOND,
                    cache_misses: 200_000,
                    context_switches: 2,
                };
                out.push(SyscallEvent::counters(
                    spec.pid,
                    spinner,
                    next_second,
                    SECOND,
                    spin,
                ));
            }
            next_second += SECOND;
        }
        out.push(e);
    }
    out
}

fn run(events: &[SyscallEvent]) -> Vec<Report> {
    let mut engine = Engine::new(Params::default()).expect("valid params");
    let mut reports = Vec::new();
    for chunk in events.chunks(4096) {
        engine.ingest("svc", chunk);
        reports.extend(engine.take_reports());
    }
    reports.extend(engine.finish());
    reports
}

#[test]
fn a_healthy_targets_counters_raise_no_symptom() {
    let reports = run(&with_counters(&spec(), None));
    assert!(reports.len() >= 5);
    for r in &reports {
        let v = r.vital_signs.as_ref().expect("counters were delivered");
        assert!(v.symptoms.is_empty() && v.threads.is_empty(), "{v:#?}");
        assert_eq!(r.verdict, Verdict::None);
    }
    let last = reports.last().and_then(|r| r.vital_signs.as_ref()).unwrap();
    // 16 threads at 0.6 G cycles a second: 9.6 cycles per ns over the window.
    let ghz = last.rates.cycles_per_ns.unwrap();
    assert!((9.0..=10.0).contains(&ghz), "{ghz}");
    assert_eq!(last.rates.ipc, Some(1.5));
    assert_eq!(last.rates.mpki, Some(5.0));
}

#[test]
fn a_spinning_thread_is_named_a_busy_loop_and_the_verdict_stays_the_syscalls() {
    let s = spec();
    let spinner = s.pid + s.threads + 100;
    let plain = run(&generate(&s).collect::<Vec<_>>());
    let reports = run(&with_counters(&s, Some(30.0)));
    // Before the spinner starts: nothing; once it has spun through a cadence epoch: it.
    let at = |r: &Report| (r.window_end_ns - s.start_ns) / SECOND;
    for r in &reports {
        let v = r.vital_signs.as_ref().unwrap();
        if at(r) <= 30 {
            assert!(v.threads.is_empty(), "{}: {v:#?}", at(r));
        } else if at(r) >= 40 {
            let t = v.threads.first().expect("the spinner is listed");
            assert_eq!(
                (t.tid, t.symptoms.as_slice()),
                (spinner, &[Symptom::BusyLoop][..])
            );
            assert_eq!(v.threads.len(), 1, "{v:#?}");
        }
    }
    // The counters change no verdict: the same reports as without them, vital signs aside.
    let verdicts = |rs: &[Report]| rs.iter().map(|r| r.verdict).collect::<Vec<_>>();
    assert_eq!(verdicts(&plain), verdicts(&reports));
    assert!(plain.iter().all(|r| r.vital_signs.is_none()));
}

/// With counters flowing, the scheduler's switch records count as the threads' context
/// switches (perf's sampled counters have none): a thread retrying a failing call in a
/// tight loop, preempted now and then but never blocking, is a syscall loop.
#[test]
fn switch_records_complete_the_counters_and_name_a_syscall_loop() {
    let (pid, looping, healthy) = (4242, 4243, 4244);
    let start = 1_000_000_000_000u64;
    let openat = faultline_engine::SyscallId::from_name("openat");
    let read = faultline_engine::SyscallId::from_name("read");
    let mut events = Vec::new();
    // 12 s: the looping thread fails an openat every 8 µs (250 calls per million cycles at
    // 0.5 G cycles a second; per-thread call counts saturate at 65,535 per 0.35 s bin,
    // about 187 k calls a second, so a faster loop reads fewer calls than it made),
    // preempted every 8 ms; the healthy one reads every 8 ms and blocks after each.
    let mut ts = start;
    while ts < start + 12 * SECOND {
        for i in 0..1_000u64 {
            let t = ts + i * 8_000;
            events.push(SyscallEvent::complete(pid, looping, openat, t, 1_000));
        }
        events.push(SyscallEvent::off_cpu(pid, looping, ts + 7_999_000, true));
        events.push(SyscallEvent::complete(pid, healthy, read, ts, 5_000));
        events.push(SyscallEvent::off_cpu(pid, healthy, ts + 5_000, false));
        ts += 8_000_000;
        if (ts - start).is_multiple_of(200 * 1_000_000) {
            let spin = PerfCounters {
                cycles: 100_000_000,
                instructions: 200_000_000,
                cache_misses: 10_000,
                context_switches: 0,
            };
            events.push(SyscallEvent::counters(pid, looping, ts, 200_000_000, spin));
            let calm = PerfCounters {
                cycles: 1_000_000,
                instructions: 1_000_000,
                cache_misses: 5_000,
                context_switches: 0,
            };
            events.push(SyscallEvent::counters(pid, healthy, ts, 200_000_000, calm));
        }
    }
    events.sort_by_key(|e| e.ts_ns);
    let reports = run(&events);
    let last = reports
        .last()
        .and_then(|r| r.vital_signs.as_ref())
        .expect("vital signs");
    assert!(last.totals.context_switches > 0, "{last:#?}");
    let names: Vec<_> = last
        .threads
        .iter()
        .map(|t| (t.tid, t.symptoms.clone()))
        .collect();
    assert_eq!(
        names,
        vec![(looping, vec![Symptom::SyscallLoop])],
        "{last:#?}"
    );
}
