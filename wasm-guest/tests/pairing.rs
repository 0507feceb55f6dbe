//! Enter/exit pairing through the engine: split records analyse like whole calls, and
//! lost, duplicated and reordered records are tolerated and counted.

use faultline_engine::synth::{generate, EventShape, StreamSpec};
use faultline_engine::{Engine, EventKind, Params, SyscallEvent, SyscallId};

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
