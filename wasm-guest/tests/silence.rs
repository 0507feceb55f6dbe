//! A target that falls silent: its host moves its clock on (`Engine::advance`) and the
//! cadence reports go on. Threads stopped between calls at once read as the environment
//! stopping the process; threads all stuck in one kind of call name that call's
//! subsystem; threads that exited are not a hang.

use faultline_engine::event::EventKind;
use faultline_engine::report::{Report, Subsystem, Verdict};
use faultline_engine::synth::{generate, EventShape, StreamSpec};
use faultline_engine::syscalls::SyscallId;
use faultline_engine::{Engine, Params, Stillness, SyscallEvent};

const S: u64 = 1_000_000_000;

/// 32 threads calling for 60 s (enter/exit halves), every call closed at the end, and
/// then each thread entering `last` (if any) and never returning. Returns the events
/// and the time of the latest one.
fn stream(last: Option<&str>) -> (Vec<SyscallEvent>, u64) {
    stream_at(200.0, last)
}

/// [`stream`] with each thread calling at about `rate` calls a second.
fn stream_at(rate: f64, last: Option<&str>) -> (Vec<SyscallEvent>, u64) {
    let spec = StreamSpec {
        threads: 32,
        syscall_types: 24,
        seconds: 60.0,
        calls_per_thread_per_second: rate,
        shape: EventShape::EnterExit,
        seed: 3,
        ..StreamSpec::default()
    };
    let (mut events, mut end) = close_calls(generate(&spec).collect());
    if let Some(name) = last {
        let mut tids: Vec<(u32, u32)> = events.iter().map(|e| (e.pid, e.tid)).collect();
        tids.sort_unstable();
        tids.dedup();
        for (k, (pid, tid)) in tids.into_iter().enumerate() {
            end += 1_000 + k as u64;
            events.push(SyscallEvent::enter(
                pid,
                tid,
                SyscallId::from_name(name),
                end,
            ));
        }
    }
    (events, end)
}

/// `events` without the entries of calls still open at their thread's end (every
/// thread outside any call), and the time of the latest record left.
fn close_calls(mut events: Vec<SyscallEvent>) -> (Vec<SyscallEvent>, u64) {
    let mut final_of = std::collections::HashMap::new();
    for (i, e) in events.iter().enumerate() {
        final_of.insert(e.tid, i);
    }
    let mut open: Vec<usize> = final_of
        .into_values()
        .filter(|&i| events[i].kind == EventKind::Enter)
        .collect();
    open.sort_unstable();
    for i in open.into_iter().rev() {
        events.remove(i);
    }
    let end = events.last().map_or(0, |e| e.ts_ns);
    (events, end)
}

/// Feeds the stream, then moves the clock on in 5-s steps to `end + silent_s`;
/// returns the reports of the silence (the ones before are checked healthy).
fn silent_for(events: &[SyscallEvent], end: u64, silent_s: u64) -> (Vec<Report>, Engine) {
    silent_as(events, end, silent_s, Stillness::Unknown)
}

/// [`silent_for`] with the host's reading of the processes.
fn silent_as(
    events: &[SyscallEvent],
    end: u64,
    silent_s: u64,
    still: Stillness,
) -> (Vec<Report>, Engine) {
    let mut engine = Engine::new(Params::default()).expect("defaults");
    for c in events.chunks(4096) {
        engine.ingest("svc", c);
    }
    let before = engine.take_reports();
    assert!(!before.is_empty());
    for r in &before {
        assert_eq!(r.verdict, Verdict::None, "healthy before: {}", r.hint);
        assert!(r.silent_seconds < 1.0, "{}", r.silent_seconds);
    }
    let mut during = Vec::new();
    for s in (5..=silent_s).step_by(5) {
        engine.advance("svc", end + s * S, still);
        during.extend(engine.take_reports());
    }
    (during, engine)
}

/// Some reports, every one without an anomaly.
fn assert_all_none(reports: &[Report]) {
    assert!(!reports.is_empty());
    for r in reports {
        assert_eq!(r.verdict, Verdict::None, "{}", r.hint);
    }
}

#[test]
fn threads_stopped_between_calls_at_once_read_as_stopped_from_outside() {
    let (events, end) = stream(None);
    let (during, _) = silent_for(&events, end, 40);
    // A cadence tick every 10 s of the 40 s, as if records had kept coming.
    assert_eq!(during.len(), 4, "{during:#?}");
    let last = during.last().expect("reports");
    assert_eq!(last.verdict, Verdict::External, "{}", last.hint);
    assert_eq!(last.subsystem, Subsystem::CpuScheduling);
    assert!(
        last.silent_seconds > 30.0 && last.silent_seconds <= 40.0,
        "{}",
        last.silent_seconds
    );
    assert!(last.hint.contains("stopped from outside"), "{}", last.hint);
    assert!(last.window_end_ns > end + 30 * S);
}

#[test]
fn threads_between_calls_of_a_target_seen_asleep_wait_in_calls_not_yet_delivered() {
    // The host saw every thread asleep: their latest calls' entries are still in the
    // source's buffers, so none spins or was stopped between calls.
    let (events, end) = stream(None);
    let (during, _) = silent_as(&events, end, 40, Stillness::Asleep);
    assert_eq!(during.len(), 4, "{during:#?}");
    assert_all_none(&during);
    let last = during.last().expect("reports");
    assert!(last.hint.contains("no work reaches it"), "{}", last.hint);
    // A record made before the silence, handed over late (a live source's buffered
    // last round, as at shutdown), does not say the target calls again...
    let read = SyscallId::from_name("read");
    let mut engine = Engine::new(Params::default()).expect("defaults");
    engine.ingest("svc", &events);
    engine.advance("svc", end + 30 * S, Stillness::Asleep);
    engine.ingest("svc", &[SyscallEvent::complete(1, 1, read, end + 1, 1_000)]);
    let fin = engine.finish().pop().expect("a final report");
    assert_eq!(fin.verdict, Verdict::None, "{}", fin.hint);
    assert!(fin.hint.contains("no work reaches it"), "{}", fin.hint);
    // ... a record past the clock does: the next silence is judged as before.
    let mut engine = Engine::new(Params::default()).expect("defaults");
    engine.ingest("svc", &events);
    engine.advance("svc", end + 10 * S, Stillness::Asleep);
    let later = end + 11 * S;
    engine.ingest("svc", &[SyscallEvent::complete(1, 1, read, later, 1_000)]);
    engine.take_reports();
    engine.advance("svc", later + 40 * S, Stillness::Unknown);
    let last = engine.take_reports().pop().expect("reports");
    assert_eq!(last.verdict, Verdict::External, "{}", last.hint);
}

#[test]
fn quiet_threads_frozen_after_their_calls_returned_read_as_stopped_from_outside() {
    // A frozen cgroup wakes blocked calls, which return, and stops each thread right
    // after it leaves its CPU; threads at a few calls a second were not busy before.
    let (mut events, mut end) = stream_at(4.0, None);
    let mut tids: Vec<(u32, u32)> = events.iter().map(|e| (e.pid, e.tid)).collect();
    tids.sort_unstable();
    tids.dedup();
    for (pid, tid) in tids {
        end += 10_000;
        events.push(SyscallEvent::off_cpu(pid, tid, end, false));
    }
    let (during, _) = silent_for(&events, end, 30);
    let last = during.last().expect("reports");
    assert_eq!(last.verdict, Verdict::External, "{}", last.hint);
    assert!(last.hint.contains("stopped from outside"), "{}", last.hint);
    assert!(last.threads.directly_affected >= 16, "{:?}", last.threads);
}

#[test]
fn threads_all_stuck_in_fsync_point_at_the_disk() {
    let (events, end) = stream(Some("fsync"));
    let (during, _) = silent_for(&events, end, 30);
    let last = during.last().expect("reports");
    assert_eq!(last.verdict, Verdict::External, "{}", last.hint);
    assert_eq!(last.subsystem, Subsystem::DiskIo);
    assert_eq!(
        last.top_syscalls_by_time
            .first()
            .map(|r| r.syscall.as_str()),
        Some("fsync")
    );
    assert!(last.hint.starts_with("The target makes no system call"));
}

#[test]
fn threads_that_exited_are_not_taken_for_a_hang() {
    let (events, end) = stream(Some("exit_group"));
    let (during, _) = silent_for(&events, end, 60);
    assert_all_none(&during);
}

#[test]
fn a_process_that_exited_is_not_taken_for_a_frozen_one() {
    // One thread calls exit_group; the kernel kills the others, those in a wait with an
    // exit record (within a millisecond), the rest without any, and none makes an exit
    // call of its own.
    let (mut events, _) = stream(None);
    // Cut where the first thread's records end, so every thread was busy up to the exit.
    let mut last_of = std::collections::HashMap::new();
    for e in &events {
        last_of.insert(e.tid, e.ts_ns);
    }
    let cut = last_of.values().copied().min().unwrap_or(0);
    events.retain(|e| e.ts_ns <= cut);
    let (events_cut, end) = close_calls(events);
    let mut events = events_cut;
    let mut tids: Vec<(u32, u32)> = events.iter().map(|e| (e.pid, e.tid)).collect();
    tids.sort_unstable();
    tids.dedup();
    let futex = SyscallId::from_name("futex");
    let exit_at = end + 1_000_000;
    for (k, &(pid, tid)) in tids.iter().enumerate().skip(1).step_by(2) {
        events.push(SyscallEvent::enter(
            pid,
            tid,
            futex,
            end + 10_000 * k as u64,
        ));
        let killed_at = exit_at + 20_000 * k as u64;
        events.push(SyscallEvent::exit(pid, tid, futex, killed_at, Some(-4)));
    }
    let (pid, tid) = tids[0];
    events.push(SyscallEvent::enter(
        pid,
        tid,
        SyscallId::from_name("exit_group"),
        exit_at,
    ));
    events.sort_by_key(|e| e.ts_ns);
    let end = events.last().map_or(0, |e| e.ts_ns);
    let (during, _) = silent_for(&events, end, 40);
    assert_all_none(&during);
}

#[test]
fn the_clock_moves_only_forward_by_at_most_an_hour_and_only_for_known_targets() {
    let (events, end) = stream(None);
    let mut engine = Engine::new(Params::default()).expect("defaults");
    engine.advance("svc", end + 5 * S, Stillness::Unknown);
    assert_eq!(engine.thread_count("svc"), 0, "no target from an advance");
    for c in events.chunks(4096) {
        engine.ingest("svc", c);
    }
    engine.take_reports();
    engine.advance("svc", end - 5 * S, Stillness::Unknown);
    assert!(engine.take_reports().is_empty());
    engine.advance("svc", end + 10 * 3_600 * S, Stillness::Unknown);
    let during = engine.take_reports();
    assert!(!during.is_empty());
    let fin = engine.finish();
    let svc = fin
        .iter()
        .find(|r| r.target == "svc")
        .expect("final report");
    assert_eq!(svc.window_end_ns, end + 3_600 * S);
}
