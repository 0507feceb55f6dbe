//! Records stamped far from a target's clock (a corrupt record, a hostile OTLP client, a
//! clock that really jumped) neither stop its reports nor unpair its calls.

use faultline_engine::clock_screen::{JUMP_CONFIRM_EVENTS, MAX_CLOCK_JUMP_NS};
use faultline_engine::report::{Report, Verdict};
use faultline_engine::synth::{generate, EventShape, StreamSpec};
use faultline_engine::{Engine, Params, SyscallEvent, SyscallId};

fn healthy(start_ns: u64, seconds: f64) -> Vec<SyscallEvent> {
    generate(&StreamSpec {
        threads: 16,
        syscall_types: 12,
        seconds,
        start_ns,
        shape: EventShape::EnterExit,
        ..StreamSpec::default()
    })
    .collect()
}

/// Feeds `batches` to a fresh engine; returns the cadence reports (engine counters
/// blanked, so streams differing only in left-out records compare equal) and the engine.
fn run<'a>(batches: impl IntoIterator<Item = &'a [SyscallEvent]>) -> (Vec<Report>, Engine) {
    let mut e = Engine::new(Params::default()).expect("valid");
    let mut reports = Vec::new();
    for b in batches {
        e.ingest("svc", b);
        reports.extend(e.take_reports().into_iter().map(|mut r| {
            r.counters = Default::default();
            r
        }));
    }
    (reports, e)
}

#[test]
fn records_stamped_near_the_end_of_time_are_left_out_and_counted() {
    let events = healthy(1_000_000_000_000, 60.0);
    let (clean, clean_engine) = run(events.chunks(4096));
    assert!(
        clean.len() >= 5,
        "a report per cadence tick: {}",
        clean.len()
    );

    // The same stream with two wild records in the middle: a call and a loss report
    // stamped near u64::MAX. Without the screen the first moved the next tick past every
    // later event and the second unpaired every later call.
    let (head, tail) = events.split_at(events.len() / 3);
    let wild = [
        SyscallEvent::complete(4242, 4242, SyscallId(1), u64::MAX - 10, 5),
        SyscallEvent::lost(4242, u64::MAX - 5),
    ];
    let batches = head
        .chunks(4096)
        .chain(std::iter::once(&wild[..]))
        .chain(tail.chunks(4096));
    let (screened, e) = run(batches);
    assert_eq!(screened, clean, "the same reports");
    let c = e.counters();
    assert_eq!(c.clock_outliers, 2);
    assert_eq!(c.calls, clean_engine.counters().calls);
    assert_eq!(c.pairs_across_loss, 0);
    assert_eq!(c.clock_resets, 0);
}

#[test]
fn a_clock_that_jumped_is_followed_once_confirmed() {
    let start = 1_000_000_000_000_000;
    let before = healthy(start, 40.0);
    // Two hours ahead, then (a separate engine) two hours back.
    for (later, resets) in [
        (start + 2 * MAX_CLOCK_JUMP_NS, 0),
        (start - 2 * MAX_CLOCK_JUMP_NS, 1),
    ] {
        let after = healthy(later, 40.0);
        let (reports, e) = run(before.chunks(4096).chain(after.chunks(50)));
        let c = e.counters();
        // The first batch after the jump is left out; the second confirms it.
        assert_eq!(c.clock_outliers, 50);
        assert!(c.clock_outliers < JUMP_CONFIRM_EVENTS);
        assert_eq!(c.clock_resets, resets);
        let last_end = reports.last().map_or(0, |r| r.window_end_ns);
        assert!(
            last_end >= later + 30_000_000_000,
            "reports go on in the new time: last window ends at {last_end}, jump to {later}"
        );
    }
}

/// A healthy 32-thread stream of 300 s (every thread ~200 calls/s).
fn busy(start_ns: u64) -> Vec<SyscallEvent> {
    generate(&StreamSpec {
        threads: 32,
        syscall_types: 24,
        seconds: 300.0,
        calls_per_thread_per_second: 200.0,
        seed: 15,
        start_ns,
        ..StreamSpec::default()
    })
    .collect()
}

#[test]
fn one_record_stamped_seconds_to_minutes_ahead_moves_no_clock() {
    let events = busy(1_000_000_000_000);
    let (clean, _) = run(events.chunks(4096));
    assert!(
        clean.len() >= 25,
        "a report per cadence tick: {}",
        clean.len()
    );
    assert!(clean.iter().all(|r| r.verdict == Verdict::None));
    // One copy of a call, 60 s into the stream, stamped later. Taken as the clock, it
    // made the reports until the data caught up describe seconds no record covered yet
    // (10 s ahead: 1 of 29 raised a verdict; 120 s: 8), or left the rest of the stream
    // without reports (20 min: none after 60 s).
    let at = events.partition_point(|e| e.ts_ns < events[0].ts_ns + 60_000_000_000);
    for ahead_s in [10u64, 120, 1_200] {
        let mut wild = events[at];
        wild.ts_ns += ahead_s * 1_000_000_000;
        let mut stream = events.clone();
        stream.insert(at + 1, wild);
        let (reports, e) = run(stream.chunks(4096));
        assert_eq!(reports, clean, "{ahead_s} s ahead: the same reports");
        assert_eq!(e.counters().clock_outliers, 1, "{ahead_s} s ahead");
    }
}

#[test]
fn a_stream_that_resumes_after_a_silence_loses_nothing() {
    let start = 1_000_000_000_000;
    let mut events = healthy(start, 40.0);
    // 30 s without a record, then 40 s more.
    events.extend(healthy(start + 70_000_000_000, 40.0));
    let cut = events.partition_point(|e| e.ts_ns < start + 60_000_000_000);
    let (whole, e) = run(events.chunks(4096));
    // Small batches after the silence: the first is held until the second confirms it.
    let (before, after) = events.split_at(cut);
    let (held, h) = run(before.chunks(4096).chain(after.chunks(50)));
    assert_eq!(held, whole, "the same reports");
    assert_eq!(h.counters().calls, e.counters().calls);
    assert_eq!(h.counters().clock_outliers, 0);
    assert!(whole
        .iter()
        .any(|r| r.window_end_ns > start + 100_000_000_000));
}

#[test]
fn per_target_parameters_past_the_target_cap_are_refused() {
    let p = Params {
        max_targets: 1,
        ..Params::default()
    };
    let mut e = Engine::new(p.clone()).expect("valid");
    e.set_target_params("a", p.clone()).expect("within the cap");
    let err = e
        .set_target_params("b", p.clone())
        .expect_err("past the cap");
    assert_eq!(err.key, "max_targets");
    e.set_target_params("a", p)
        .expect("a target already set may change");
}
