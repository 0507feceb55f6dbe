//! Enter/exit pairing through the engine: split records analyse like whole calls, and
//! lost, duplicated and reordered records are tolerated and counted.

use faultline_engine::synth::{generate, EventShape, StreamSpec};
use faultline_engine::{Engine, EventKind, Params, Stillness, SyscallEvent, SyscallId};

fn stream(shape: EventShape) -> Vec<SyscallEvent> {
    generate(&StreamSpec {
        threads: 8,
        seconds: 5.0,
        shape,
        seed: 3,
        ..StreamSpec::default()
    })
    .collect()
}

#[test]
fn enter_exit_pairs_into_the_same_calls_as_complete_records() {
    let complete = stream(EventShape::Complete);
    let split = stream(EventShape::EnterExit);
    let (mut a, mut b) = (
        Engine::new(Params::default()).expect("valid"),
        Engine::new(Params::default()).expect("valid"),
    );
    a.ingest("t", &complete);
    b.ingest("t", &split);
    // The stream ends with a call longer than a second: its exit record leapt past every
    // other record and is held until the stream goes on (see `LeapHold`); here the
    // host's clock says it did.
    let end = split.iter().map(|e| e.ts_ns).max().unwrap_or(0);
    a.advance("t", end, Stillness::Unknown);
    b.advance("t", end, Stillness::Unknown);
    let (ca, cb) = (a.counters(), b.counters());
    assert_eq!(ca.calls, complete.len() as u64);
    assert_eq!(cb.calls, ca.calls, "every enter/exit pair became one call");
    assert_eq!(
        (
            cb.lost_enters,
            cb.lost_exits,
            cb.unmatched_exits,
            cb.duplicate_records
        ),
        (0, 0, 0, 0)
    );
}

#[test]
fn generic_exit_takes_the_pending_syscall() {
    let read = SyscallId::from_name("read");
    let mut e = Engine::new(Params::default()).expect("valid");
    e.ingest(
        "t",
        &[
            SyscallEvent::enter(1, 1, read, 100),
            SyscallEvent::exit(1, 1, SyscallId::UNKNOWN, 160, Some(3)),
        ],
    );
    assert_eq!(e.counters().calls, 1);
    let r = e.finish().pop().expect("report");
    assert_eq!(r.syscalls.first().map(|s| s.syscall.as_str()), Some("read"));
    assert!((r.syscalls[0].mean_latency_seconds - 60e-9).abs() < 1e-12);
}

#[test]
fn loss_duplication_and_reordering_are_counted_not_fatal() {
    let split = stream(EventShape::EnterExit);
    let n_exits = split.iter().filter(|e| e.kind == EventKind::Exit).count() as u64;
    // Drop every 50th record, duplicate every 70th, and swap neighbours every 90th,
    // delivering in batches of 100 so some disorder crosses batch boundaries.
    let mut damaged = Vec::new();
    let (mut dropped_exits, mut dropped_enters, mut dups) = (0u64, 0u64, 0u64);
    for (i, ev) in split.iter().enumerate() {
        if i % 50 == 49 {
            match ev.kind {
                EventKind::Exit => dropped_exits += 1,
                _ => dropped_enters += 1,
            }
            continue;
        }
        damaged.push(*ev);
        if i % 70 == 69 {
            damaged.push(*ev);
            dups += 1;
        }
    }
    for i in (0..damaged.len().saturating_sub(1)).step_by(90) {
        damaged.swap(i, i + 1);
    }
    let mut e = Engine::new(Params::default()).expect("valid");
    for chunk in damaged.chunks(100) {
        e.ingest("t", chunk);
    }
    e.advance(
        "t",
        damaged.iter().map(|e| e.ts_ns).max().unwrap_or(0),
        Stillness::Unknown,
    );
    let c = e.counters();
    assert_eq!(c.events, damaged.len() as u64);
    assert_eq!(c.duplicate_records, dups, "{c:?}");
    // A lost exit shows when the thread's next entry arrives; a lost entry when its
    // exit finds nothing pending.
    assert!(c.lost_exits >= dropped_exits.saturating_sub(8), "{c:?}");
    assert!(c.lost_enters >= dropped_enters.saturating_sub(8), "{c:?}");
    assert!(c.calls <= n_exits && c.calls >= n_exits - dropped_exits - dropped_enters - dups);
    let r = e.finish().pop().expect("report");
    assert_eq!(r.counters, c);
}

/// Total execution time of the calls a report saw (seconds).
fn call_time(r: &faultline_engine::Report) -> f64 {
    r.syscalls
        .iter()
        .map(|s| s.calls as f64 * s.mean_latency_seconds)
        .sum()
}

/// A healthy enter/exit stream of process `spec.pid`, and its first timestamp.
fn healthy_split(threads: u32, seconds: f64) -> (StreamSpec, Vec<SyscallEvent>, u64) {
    let spec = StreamSpec {
        threads,
        seconds,
        shape: EventShape::EnterExit,
        seed: 5,
        ..StreamSpec::default()
    };
    let split: Vec<SyscallEvent> = generate(&spec).collect();
    let start = split.first().map_or(0, |e| e.ts_ns);
    (spec, split, start)
}

/// A tracer overrun loses every record of a 30 ms window: a thread whose exit and next
/// entry both fell in it would pair the entry before the window with the exit after it,
/// one call of ≥ 30 ms that never happened. Reported (`SyscallEvent::lost`), such pairs
/// are dropped and counted, and nothing else changes.
#[test]
fn a_reported_loss_keeps_pairs_from_spanning_it() {
    let (spec, split, start) = healthy_split(64, 30.0);
    let (lo, hi) = (start + 20_000_000_000, start + 20_030_000_000);
    let kept: Vec<SyscallEvent> = split
        .iter()
        .filter(|e| e.ts_ns < lo || e.ts_ns >= hi)
        .copied()
        .collect();
    // The pairs that span the window: the thread's last record before it is an entry and
    // its first after it an exit (of another call: a whole call fits in a gap of 30 ms).
    let mut before = std::collections::HashMap::new();
    let mut after = std::collections::HashMap::new();
    for e in &kept {
        if e.ts_ns < lo {
            before.insert(e.tid, e.kind);
        } else {
            after.entry(e.tid).or_insert(e.kind);
        }
    }
    let spanning = before
        .iter()
        .filter(|&(tid, &k)| k == EventKind::Enter && after.get(tid) == Some(&EventKind::Exit))
        .count() as u64;
    assert!(
        spanning >= 5,
        "the window must catch some pairs: {spanning}"
    );
    let at = kept.partition_point(|e| e.ts_ns < hi);
    let mut reported = kept.clone();
    reported.insert(at, SyscallEvent::lost(spec.pid, hi));

    let run = |events: &[SyscallEvent]| {
        let mut e = Engine::new(Params::default()).expect("valid");
        for chunk in events.chunks(1000) {
            e.ingest("t", chunk);
        }
        let r = e.finish().pop().expect("report");
        (e.counters(), r)
    };
    let (silent, silent_report) = run(&kept);
    let (told, told_report) = run(&reported);
    assert_eq!((silent.loss_reports, silent.pairs_across_loss), (0, 0));
    assert_eq!((told.loss_reports, told.pairs_across_loss), (1, spanning));
    assert_eq!(told.events, silent.events + 1);
    assert_eq!(told.calls + spanning, silent.calls, "{told:?}");
    // The dropped pairs are the ones that would have lasted the window.
    let extra = call_time(&silent_report) - call_time(&told_report);
    assert!(
        extra >= spanning as f64 * 0.030 * 0.999,
        "{extra} s for {spanning} pairs"
    );
    assert_eq!(told_report.verdict, faultline_engine::Verdict::None);
}

/// Repeated overruns (20 ms of records lost every 250 ms for 15 s, as under a syscall
/// storm with a small ring buffer) on a healthy stream: reported, they raise no verdict;
/// unreported, the pairs and gaps spanning them read as an internal fault.
#[test]
fn reported_overruns_raise_no_verdict() {
    let (spec, split, start) = healthy_split(32, 60.0);
    let lost = |t: u64| {
        let rel = t.saturating_sub(start);
        (30_000_000_000..45_000_000_000).contains(&rel) && (rel / 1_000_000) % 250 < 20
    };
    let (mut silent, mut told) = (Vec::new(), Vec::new());
    let mut in_loss = false;
    for e in &split {
        if lost(e.ts_ns) {
            in_loss = true;
            continue;
        }
        if std::mem::take(&mut in_loss) {
            // perf reports an overrun with its next record.
            told.push(SyscallEvent::lost(spec.pid, e.ts_ns));
        }
        silent.push(*e);
        told.push(*e);
    }
    let run = |events: &[SyscallEvent]| {
        let mut e = Engine::new(Params::default()).expect("valid");
        let mut raised = 0;
        for chunk in events.chunks(1000) {
            e.ingest("t", chunk);
            raised += e
                .take_reports()
                .iter()
                .filter(|r| r.verdict != faultline_engine::Verdict::None)
                .count();
        }
        let on_demand = e.trigger("t", start + 40_000_000_000).expect("target");
        (raised, on_demand.verdict, e.counters())
    };
    let (raised, on_demand, c) = run(&told);
    assert_eq!(c.loss_reports, 60);
    assert!(c.pairs_across_loss > 0, "{c:?}");
    assert_eq!(
        (raised, on_demand),
        (0, faultline_engine::Verdict::None),
        "{c:?}"
    );
    // Without the reports the same stream does raise verdicts: the test is sensitive.
    let (raised, on_demand, _) = run(&silent);
    assert!(
        raised > 0 || on_demand != faultline_engine::Verdict::None,
        "unreported overruns were harmless here; this test no longer shows what the reports fix"
    );
}
