//! Property tests: any event sequence, in any order and shape, never panics, and the
//! engine's state stays within the bound implied by its parameters.

use faultline_engine::{Engine, EventKind, Params, PerfCounters, Report, SyscallEvent, SyscallId};
use proptest::prelude::*;

/// A report comes back from its JSON unchanged. JSON has no NaN or infinity (serde_json
/// writes `null`, which no number reads back), and the WASM host receives every report as
/// JSON: one such value would lose all the reports of that call, in the sandbox only.
fn round_trips(r: &Report) -> Result<(), TestCaseError> {
    let json = serde_json::to_string(r).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let back: Report =
        serde_json::from_str(&json).map_err(|e| TestCaseError::fail(format!("{e}: {json}")))?;
    prop_assert_eq!(&back, r, "{}", json);
    Ok(())
}

/// The reports that became due are sound.
fn check_due(e: &mut Engine) -> Result<(), TestCaseError> {
    for r in e.take_reports() {
        round_trips(&r)?;
        prop_assert!(r.impact_factor >= 0.0 && r.impact_factor <= 1.0);
        prop_assert!(r.threads.directly_affected <= r.threads.affected);
        if let Some(v) = &r.vital_signs {
            prop_assert!(v.threads.len() <= 8);
        }
    }
    Ok(())
}

fn event() -> impl Strategy<Value = SyscallEvent> {
    (
        0u32..4,
        0u32..40,
        0u16..600,
        0u8..10,
        prop_oneof![0u64..1_000_000_000_000, Just(u64::MAX), Just(0u64)],
        prop_oneof![0u64..10_000_000_000, Just(u64::MAX)],
        // Counters on any record, including extreme ones (sums saturate).
        prop::option::of((
            prop_oneof![0u64..10_000_000_000, Just(u64::MAX)],
            0u64..10_000_000_000,
            0u64..1_000_000,
            prop_oneof![0u64..100, Just(u64::MAX)],
        )),
        // Any return value: for switch records 0 (asleep), 1 (preempted), 2 (blocked
        // uninterruptibly) and whatever else a batch may hold.
        prop::option::of(prop_oneof![0i64..4, Just(i64::MIN), Just(-1i64)]),
    )
        .prop_map(|(pid, tid, sc, kind, ts, dur, perf, ret)| SyscallEvent {
            pid,
            tid,
            syscall: SyscallId(sc),
            kind: match kind {
                0 => EventKind::Complete,
                1 => EventKind::Enter,
                2 | 3 => EventKind::Exit,
                4 => EventKind::OnCpu,
                5 => EventKind::OffCpu,
                6 => EventKind::Counters,
                7 => EventKind::TcpSegments,
                _ => EventKind::Lost,
            },
            ts_ns: ts,
            duration_ns: dur,
            ret,
            perf: perf.map(
                |(cycles, instructions, cache_misses, context_switches)| PerfCounters {
                    cycles,
                    instructions,
                    cache_misses,
                    context_switches,
                },
            ),
        })
}

fn small_params() -> Params {
    Params {
        max_threads: 16,
        max_targets: 2,
        cadence_seconds: 1.0,
        window_seconds: 5.0,
        moving_average_k: 3,
        min_baseline_samples: 2,
        ..Params::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn any_sequence_is_safe_and_bounded(
        batches in prop::collection::vec(prop::collection::vec(event(), 0..200), 1..8),
        targets in prop::collection::vec("[a-c]", 1..8),
        trigger_at in any::<u64>(),
        // k ≤ 5 keeps the rings in the channel records, a larger k in a slab; a target
        // may switch between the two mid-stream.
        ks in prop::collection::vec(prop_oneof![Just(3usize), Just(5), Just(7)], 1..4),
    ) {
        let p = Params {
            moving_average_k: ks[0],
            ..small_params()
        };
        let mut e = Engine::new(p.clone()).expect("valid");
        for (i, b) in batches.iter().enumerate() {
            let t = &targets[i % targets.len()];
            if let Some(&k) = ks.get(i).filter(|_| i > 0) {
                let q = Params {
                    moving_average_k: k,
                    ..p.clone()
                };
                // Refused only past the cap on targets with parameters of their own.
                if let Err(err) = e.set_target_params(t, q) {
                    prop_assert_eq!(err.key, "max_targets");
                }
            }
            e.ingest(t, b);
            check_due(&mut e)?;
            if let Some(r) = e.trigger(t, trigger_at) {
                round_trips(&r)?;
            }
            let _ = e.calibrate(t, Some(trigger_at));
            // An alarm's time confirms held records (see `LeapHold`): their reports.
            check_due(&mut e)?;
        }
        for t in ["a", "b", "c"] {
            prop_assert!(e.thread_count(t) <= p.max_threads);
        }
        let total: u64 = batches.iter().map(|b| b.len() as u64).sum();
        prop_assert_eq!(e.counters().events, total);
        // 2 targets × 16 threads × ≤ 24 channels: far below a megabyte.
        prop_assert!(e.state_bytes() < 4 << 20, "state {}", e.state_bytes());
        let finals = e.finish();
        prop_assert!(finals.len() <= p.max_targets + 64);
        for r in &finals {
            round_trips(r)?;
        }
    }
}
