//! A target whose load one thread carries (a single-threaded event loop: nginx's one busy
//! worker beside its idle master). No second thread can corroborate the worker's outliers,
//! so on demand the alarm does: the worker's lasting outlier, when it was the only busy
//! thread, is the anomaly (τ 1 of 1). Continuous mode asks for two threads, or for the
//! scheduler's account of a CPU neighbour.

#[path = "common/replay.rs"]
mod replay;

use faultline_engine::report::{DecisionPath, Report, Subsystem, Verdict};
use faultline_engine::syscalls::SyscallId;
use faultline_engine::SyscallEvent;

const MS: u64 = 1_000_000;
const S: u64 = 1_000 * MS;
const START: u64 = 1_000 * S;
const FAULT: u64 = START + 60 * S;
const END: u64 = START + 100 * S;

fn id(name: &str) -> SyscallId {
    SyscallId::from_name(name)
}

/// How a worker's calls go from [`FAULT`] on.
#[derive(Clone, Copy, PartialEq)]
enum After {
    /// As before.
    Same,
    /// Every call but its wait 20× longer (a CPU hog preempting it inside its calls).
    Slowed,
    /// No more requests: it waits in `epoll_wait` 1 s at a time.
    Idle,
    /// Once, 2 s in, it pauses 1.5 s between calls, or in one `fsync`, then serves on.
    PausesOnce { in_fsync: bool },
    /// Its calls keep their times but it reads each request in five `recvfrom`s.
    ReadsMore,
}

/// `workers` event-loop threads serving requests (wait 0.5 ms in `epoll_wait`, then
/// `recvfrom`, `openat`, `sendfile`, `close`: about 1,700 calls/s), and a master thread
/// waking every second; worker 0's calls change at [`FAULT`] as `after` says.
fn event_loop(workers: u32, after: After) -> Vec<SyscallEvent> {
    let mut ev = Vec::new();
    let mut t = START;
    while t < END {
        ev.push(SyscallEvent::complete(
            1,
            1,
            id("rt_sigsuspend"),
            t,
            S - 20_000,
        ));
        t += S;
    }
    for w in 0..workers {
        let tid = 10 + w;
        let mut t = START + u64::from(w) * 137_000;
        let mut paused = false;
        while t < END {
            let changed = w == 0 && t >= FAULT;
            if let (true, After::PausesOnce { in_fsync }) = (changed && !paused, after) {
                if t >= FAULT + 2 * S {
                    paused = true;
                    if in_fsync {
                        ev.push(SyscallEvent::complete(1, tid, id("fsync"), t, 1_500 * MS));
                    }
                    t += 1_500 * MS + 5_000;
                }
            }
            if changed && after == After::Idle {
                ev.push(SyscallEvent::complete(1, tid, id("epoll_wait"), t, S));
                t += S + 10_000;
                continue;
            }
            let slow = |name| {
                if changed && after == After::Slowed && name != "epoll_wait" {
                    20
                } else {
                    1
                }
            };
            let reads = if changed && after == After::ReadsMore {
                5
            } else {
                1
            };
            for _ in 1..reads {
                ev.push(SyscallEvent::complete(1, tid, id("recvfrom"), t, 5_000));
                t += 10_000;
            }
            for (name, dur) in [
                ("epoll_wait", 500_000),
                ("recvfrom", 5_000),
                ("openat", 8_000),
                ("sendfile", 30_000),
                ("close", 4_000),
            ] {
                let dur = dur * slow(name);
                ev.push(SyscallEvent::complete(1, tid, id(name), t, dur));
                t += dur + 5_000;
            }
        }
    }
    ev.sort_by_key(|e| e.ts_ns);
    ev
}

/// `events` plus worker 0's switches away, every 4 ms: blocking with the CPU left idle,
/// or, from `hog_at` on, preempted by another process's task (a CPU hog).
fn with_switches(mut events: Vec<SyscallEvent>, hog_at: Option<u64>) -> Vec<SyscallEvent> {
    const HOG: u32 = 999_999;
    let mut t = START + 2 * MS;
    while t < END {
        let hogged = hog_at.is_some_and(|at| t >= at);
        events.push(SyscallEvent::on_cpu(1, 10, t, 40_000));
        let next = if hogged { HOG } else { 0 };
        events.push(SyscallEvent::off_cpu_to(1, 10, t + 1, hogged, next));
        t += 4 * MS;
    }
    events.sort_by_key(|e| e.ts_ns);
    events
}

/// The on-demand report at [`FAULT`] + 10 s, and every continuous report after the fault.
fn diagnose(events: &[SyscallEvent]) -> (Report, Vec<Report>) {
    let (after, alarm) = replay::reports_and_alarm("web", events, FAULT, FAULT + 10 * S);
    (alarm, after)
}

#[test]
fn the_only_busy_thread_slowed_at_the_alarm_is_an_environment_fault() {
    let (alarm, after) = diagnose(&event_loop(1, After::Slowed));
    assert_eq!(alarm.verdict, Verdict::External, "{}", alarm.hint);
    assert_eq!(alarm.threads.directly_affected, 1);
    // Continuous mode has no alarm to corroborate a single thread, and without the
    // scheduler's records nothing else does.
    assert!(!after.is_empty());
    assert!(after.iter().all(|r| r.verdict == Verdict::None));
}

#[test]
fn the_only_busy_thread_running_out_of_requests_is_no_fault() {
    let (alarm, after) = diagnose(&event_loop(1, After::Idle));
    assert_eq!(alarm.verdict, Verdict::None, "{}", alarm.hint);
    assert!(after.iter().all(|r| r.verdict == Verdict::None));
}

#[test]
fn the_only_busy_thread_pausing_once_is_no_fault() {
    // A stop lasts by definition, but one pause of the only thread that could show it
    // is not an environment that stays slow.
    for in_fsync in [false, true] {
        let (alarm, _) = diagnose(&event_loop(1, After::PausesOnce { in_fsync }));
        assert_eq!(alarm.verdict, Verdict::None, "{in_fsync}: {}", alarm.hint);
    }
}

#[test]
fn the_only_busy_thread_calling_more_often_is_no_environment_fault() {
    // A frequency outlier alone: more calls of the same speed are the thread's own doing
    // (or its clients'), not an environment that slows calls.
    let (alarm, _) = diagnose(&event_loop(1, After::ReadsMore));
    assert_eq!(alarm.verdict, Verdict::None, "{}", alarm.hint);
}

#[test]
fn one_slowed_thread_beside_another_busy_one_is_not_the_target_alone() {
    // Its peer goes on as before: one of two busy threads is no corroborated anomaly,
    // and not a target whose load one thread carries.
    let (alarm, _) = diagnose(&event_loop(2, After::Slowed));
    assert_eq!(alarm.verdict, Verdict::None, "{}", alarm.hint);
    // The same stream unchanged is quiet too.
    let (quiet, _) = diagnose(&event_loop(1, After::Same));
    assert_eq!(quiet.verdict, Verdict::None, "{}", quiet.hint);
}

#[test]
fn in_continuous_mode_a_cpu_neighbour_corroborates_the_only_busy_thread() {
    // Other processes took the CPU the worker gave up, and it stopped going idle: the
    // environment, as the alarm would say.
    let (alarm, after) = diagnose(&with_switches(event_loop(1, After::Slowed), Some(FAULT)));
    assert_eq!(alarm.verdict, Verdict::External, "{}", alarm.hint);
    let first = after
        .iter()
        .find(|r| r.verdict != Verdict::None)
        .expect("a continuous report");
    assert_eq!(
        (first.verdict, first.decided_by, first.subsystem),
        (
            Verdict::External,
            DecisionPath::ImpactFactor,
            Subsystem::CpuScheduling
        ),
        "{first:#?}"
    );
    let c = first.cpu_taken.expect("switch records");
    assert!(c.taken && c.saturated, "{c:?}");
    let onset = first.anomaly_onset_ns.expect("an onset");
    assert!((FAULT..FAULT + 3 * S).contains(&onset), "{first:#?}");
    assert!(after.iter().all(|r| r.verdict != Verdict::Internal));

    // The same slowdown with the CPU still idle has no neighbour to blame, nor has it
    // when a hog came 20 s after it; and a neighbour the worker's calls did not feel is
    // no anomaly of the service.
    let later = Some(FAULT + 20 * S);
    for (events, what) in [
        (with_switches(event_loop(1, After::Slowed), None), "no hog"),
        (
            with_switches(event_loop(1, After::Slowed), later),
            "a later hog",
        ),
        (
            with_switches(event_loop(1, After::Same), Some(FAULT)),
            "calls unchanged",
        ),
    ] {
        let (_, after) = diagnose(&events);
        assert!(!after.is_empty());
        assert!(
            after.iter().all(|r| r.verdict == Verdict::None),
            "{what}: {:#?}",
            after.iter().find(|r| r.verdict != Verdict::None)
        );
    }
}
