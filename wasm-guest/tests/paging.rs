//! Waits in page faults from the scheduler's records: a thread blocked uninterruptibly
//! (`D`) outside any call waits for a page fault, so an anomaly during which such waits
//! rose is a memory matter whichever calls slowed (`cpu_time::PagingTest`). Generated
//! streams of enter/exit halves with `sched_switch`-like records at 4-ms ticks of every
//! thread.

use faultline_engine::report::{DecisionPath, Report, Subsystem, Verdict};
use faultline_engine::synth::{EventShape, StreamSpec};
use faultline_engine::{EventKind, SyscallEvent};

#[path = "common/ticks.rs"]
mod ticks;
use ticks::{add_burner, fault_start_ns, run, slowdown, with_ticks, IDLE};

/// 32 threads over 50 s, every one slowed ×8 from 40 s at once (an environment fault).
fn stream(shape: EventShape) -> StreamSpec {
    StreamSpec {
        shape,
        ..ticks::stream(21, Some(slowdown(1.0, 0.0)))
    }
}

/// `s`'s calls plus, at every 4-ms tick of every thread, one blocking switch away leaving
/// the CPU idle: uninterruptible when `d(at, tick)`.
fn with_switches(s: &StreamSpec, d: impl Fn(u64, u64) -> bool) -> Vec<SyscallEvent> {
    with_ticks(s, |tid, at, n| {
        let off = SyscallEvent::off_cpu_to(s.pid, tid, at, false, IDLE);
        if d(at, n) {
            off.uninterruptible()
        } else {
            off
        }
    })
}

/// From `from_ns`, 1 blocking switch in 3 is uninterruptible.
fn paging_from(from_ns: u64) -> impl Fn(u64, u64) -> bool {
    move |at, n| at >= from_ns && n % 3 == 0
}

fn diagnose(events: &[SyscallEvent], at: u64) -> Report {
    run(events).1.trigger("svc", at).expect("report")
}

/// Every thread slowed at once, its threads waiting in page faults between their calls:
/// external, memory, whichever calls slowed; the same slowdown with ordinary sleeps keeps
/// the calls' subsystem.
#[test]
fn page_fault_waits_name_memory() {
    let s = stream(EventShape::EnterExit);
    let from = fault_start_ns(&s);
    let r = diagnose(&with_switches(&s, paging_from(from)), from);
    assert_eq!(
        (r.verdict, r.subsystem),
        (Verdict::External, Subsystem::Memory),
        "{r:#?}"
    );
    let c = r.cpu_taken.expect("switch records");
    assert!(c.paging && c.paging_share_before == 0.0, "{c:?}");
    assert!(c.paging_share_after > 0.2, "{c:?}");
    assert!(r.hint.contains("page faults"), "{}", r.hint);
    assert!(r.counters.page_wait_records > 0, "{:?}", r.counters);

    let r = diagnose(&with_switches(&s, |_, _| false), from);
    assert_eq!(r.verdict, Verdict::External, "{r:#?}");
    assert_ne!(r.subsystem, Subsystem::Memory, "{r:#?}");
    let c = r.cpu_taken.expect("switch records");
    assert!(!c.paging && c.paging_share_after == 0.0, "{c:?}");
    assert_eq!(r.counters.page_wait_records, 0);
}

/// Reclaim's kernel workers take the CPU as a hog would: other processes' tasks get it at
/// the target's switches away. A slowdown of some threads then reads external by the
/// neighbour rule (other processes did take the CPU), and paging, not the CPU, names the
/// subsystem.
#[test]
fn paging_outranks_the_cpu_rules() {
    let s = StreamSpec {
        shape: EventShape::EnterExit,
        ..ticks::stream(22, Some(slowdown(0.25, 2.0)))
    };
    let from = fault_start_ns(&s);
    let reclaim = 999_999;
    let events = with_ticks(&s, |tid, at, n| {
        if at < from {
            return SyscallEvent::off_cpu_to(s.pid, tid, at, false, IDLE);
        }
        let off = SyscallEvent::off_cpu_to(s.pid, tid, at, false, reclaim);
        if n % 3 == 0 {
            off.uninterruptible()
        } else {
            off
        }
    });
    let r = diagnose(&events, from);
    let c = r.cpu_taken.expect("switch records");
    assert!(c.paging && c.taken && c.saturated, "{c:?}");
    assert!(r.impact_factor < 0.8, "{r:#?}");
    assert_eq!(
        (r.verdict, r.decided_by, r.subsystem),
        (
            Verdict::External,
            DecisionPath::CpuNeighbour,
            Subsystem::Memory
        ),
        "{r:#?}"
    );
    assert!(r.hint.contains("page faults"), "{}", r.hint);
}

/// On demand, paging that began after the onset's span is found in the span before the
/// alarm.
#[test]
fn paging_before_the_alarm_counts() {
    let s = stream(EventShape::EnterExit);
    let from = fault_start_ns(&s);
    let late = from + 3_500_000_000;
    let events = with_switches(&s, |at, n| at >= late && n % 3 != 0);
    let r = diagnose(&events, from + 7_500_000_000);
    assert_eq!(
        r.anomaly_onset_ns.map(|t| t < from + 1_000_000_000),
        Some(true),
        "{r:#?}"
    );
    assert!(r.cpu_taken.is_some_and(|c| c.paging), "{r:#?}");
    assert_eq!(r.subsystem, Subsystem::Memory, "{r:#?}");
}

/// A preemption stays one whatever the source says of its state.
#[test]
fn a_preemption_is_never_uninterruptible() {
    let off = SyscallEvent::off_cpu(1, 2, 3, true).uninterruptible();
    assert!(off.preempted() && !off.blocked_uninterruptibly());
    let off = SyscallEvent::off_cpu(1, 2, 3, false).uninterruptible();
    assert!(!off.preempted() && off.blocked_uninterruptibly());
    let call = SyscallEvent::exit(1, 2, faultline_engine::SyscallId(1), 3, Some(0));
    assert_eq!(call.uninterruptible().ret, Some(0), "not a switch record");
}

/// Uninterruptible waits inside calls are the calls' own I/O (a disk read, a flush), not
/// page faults: the same number of them, each right after a call's entry, names nothing.
#[test]
fn uninterruptible_waits_in_calls_are_not_paging() {
    let s = stream(EventShape::EnterExit);
    let from = fault_start_ns(&s);
    let mut events = with_switches(&s, |_, _| false);
    let in_calls: Vec<SyscallEvent> = events
        .iter()
        .filter(|e| e.kind == EventKind::Enter && e.ts_ns >= from)
        .step_by(3)
        .map(|e| SyscallEvent::off_cpu_to(e.pid, e.tid, e.ts_ns + 1, false, IDLE).uninterruptible())
        .collect();
    assert!(in_calls.len() > 1000);
    events.extend(in_calls);
    events.sort_by_key(|e| e.ts_ns);
    let r = diagnose(&events, from);
    assert_no_page_waits(&r);
}

/// A source of complete calls cannot say whether a switch fell inside a call: its
/// uninterruptible waits count for nothing.
#[test]
fn complete_calls_cannot_tell_page_faults() {
    let s = stream(EventShape::Complete);
    let from = fault_start_ns(&s);
    let r = diagnose(&with_switches(&s, paging_from(from)), from);
    assert_no_page_waits(&r);
}

/// Records lost just before a switch may have held the thread's next entry: the engine
/// does not guess that it was between calls.
#[test]
fn after_a_loss_no_switch_is_taken_for_a_page_wait() {
    let s = stream(EventShape::EnterExit);
    let from = fault_start_ns(&s);
    let mut events = Vec::new();
    for e in with_switches(&s, paging_from(from)) {
        if e.blocked_uninterruptibly() {
            events.push(SyscallEvent::lost(e.pid, e.ts_ns));
        }
        events.push(e);
    }
    let r = diagnose(&events, from);
    assert!(r.counters.loss_reports > 1000, "{:?}", r.counters);
    assert_eq!(r.counters.page_wait_records, 0, "{:?}", r.counters);
    assert_ne!(r.subsystem, Subsystem::Memory, "{r:#?}");
}

/// A target that paged as much before has no new memory shortage to blame: the rise is
/// what counts (the count and share thresholds: `cpu_time`'s unit tests).
#[test]
fn paging_needs_a_rise() {
    let s = stream(EventShape::EnterExit);
    let from = fault_start_ns(&s);
    let r = diagnose(&with_switches(&s, paging_from(0)), from);
    let c = r.cpu_taken.expect("switch records");
    assert!(c.paging_share_before > 0.2 && !c.paging, "{c:?}");
    assert_ne!(r.subsystem, Subsystem::Memory, "{r:#?}");
}

/// A thread of the target burning a CPU is the finding even when the target pages: the
/// burner's subsystem stands.
#[test]
fn a_burner_outranks_paging() {
    let s = stream(EventShape::EnterExit);
    let from = fault_start_ns(&s);
    let mut events = with_switches(&s, paging_from(from));
    let burner = s.pid + 3;
    add_burner(&mut events, &s, burner, from);
    let r = diagnose(&events, from);
    assert!(r.cpu_taken.is_some_and(|c| c.paging), "{r:#?}");
    assert!(r.cpu_burners.iter().any(|b| b.tid == burner), "{r:#?}");
    assert_eq!(r.subsystem, Subsystem::CpuScheduling, "{r:#?}");
}

/// The external verdict of the streams' slowdown, with no wait counted as a page fault
/// and so no `memory` subsystem.
fn assert_no_page_waits(r: &Report) {
    assert_eq!(r.verdict, Verdict::External, "{r:#?}");
    assert_ne!(r.subsystem, Subsystem::Memory, "{r:#?}");
    assert_eq!(r.counters.page_wait_records, 0, "{:?}", r.counters);
}
