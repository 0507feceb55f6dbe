//! A CPU quota from the scheduler's records: a thread switched away while still runnable,
//! with the CPU left idle, was throttled by its group's quota (cgroup `cpu.max`), which
//! is the environment whatever τ says (`cpu_time::ThrottleTest`). Generated streams with
//! `sched_switch`-like records at 4-ms ticks of every thread.

use faultline_engine::report::{DecisionPath, Report, Subsystem, Verdict};
use faultline_engine::synth::StreamSpec;
use faultline_engine::SyscallEvent;
use std::ops::Range;

#[path = "common/ticks.rs"]
mod ticks;
use ticks::{add_burner, fault_start_ns, run, slowdown, with_ticks, IDLE};

/// A task of no thread of the stream's service.
const OTHER_PROCESS: u32 = 999_999;

/// 32 threads over 50 s; with `subset`, a quarter of them slowed ×8 from 40 s, at
/// onsets up to 2 s apart (a fault of some threads: τ reads internal).
fn stream(subset: bool) -> StreamSpec {
    ticks::stream(12, subset.then(|| slowdown(0.25, 2.0)))
}

/// How a thread leaves its CPU at one tick.
#[derive(Clone, Copy)]
struct Switch {
    preempted: bool,
    next: u32,
}

/// `s`'s calls plus, at every 4-ms tick of every thread, 1 % of the tick on a CPU and
/// one switch away as `switch(spec, tid, at, tick index)` says.
fn with_switches(
    s: StreamSpec,
    switch: impl Fn(&StreamSpec, u32, u64, u64) -> Switch,
) -> (StreamSpec, Vec<SyscallEvent>) {
    let events = with_ticks(&s, |tid, at, n| {
        let sw = switch(&s, tid, at, n);
        SyscallEvent::off_cpu_to(s.pid, tid, at, sw.preempted, sw.next)
    });
    (s, events)
}

/// Outside `during` a thread blocks with the CPU left idle, and 1 switch in 20 hands it
/// to another process (as nginx's worker: idle after 0.97 of its switches away; no
/// recording without a cap was ever preempted into an idle CPU). During it, when
/// `quota`, 1 switch in 3 is a preemption that leaves the CPU idle (throttled); else it
/// hands the CPU to another of the service's threads (its own queueing).
fn switches(quota: bool, during: Vec<Range<u64>>) -> impl Fn(&StreamSpec, u32, u64, u64) -> Switch {
    move |s, tid, at, n| {
        if during.iter().any(|d| d.contains(&at)) && n % 3 == 0 {
            if quota {
                Switch {
                    preempted: true,
                    next: IDLE,
                }
            } else {
                Switch {
                    preempted: true,
                    next: s.pid + (tid - s.pid + 1) % s.threads,
                }
            }
        } else if n % 20 == 0 {
            Switch {
                preempted: false,
                next: OTHER_PROCESS,
            }
        } else {
            Switch {
                preempted: false,
                next: IDLE,
            }
        }
    }
}

/// One spell of switches as `switches` says, for `during`.
fn spell(during: Range<u64>) -> Vec<Range<u64>> {
    vec![during]
}

/// The quota's verdict: external, decided by the throttled switches, CPU scheduling.
fn assert_quota_verdict(r: &Report) {
    assert_eq!(
        (r.verdict, r.decided_by, r.subsystem),
        (
            Verdict::External,
            DecisionPath::CpuThrottled,
            Subsystem::CpuScheduling
        ),
        "{r:#?}"
    );
}

/// A quota makes a slowdown of some threads external: they met the throttled periods,
/// the others did not show it in their calls (measured: MariaDB under a marginal cap read
/// internal, τ 0.57). The same preemptions handing the CPU to the service's own threads
/// are its own queueing, and τ's verdict stands.
#[test]
fn a_quota_makes_a_local_looking_slowdown_external() {
    for quota in [true, false] {
        let s = stream(true);
        let from = fault_start_ns(&s);
        let (s, events) = with_switches(s, switches(quota, spell(from..u64::MAX)));
        let (_, mut engine) = run(&events);
        let r = engine.trigger("svc", fault_start_ns(&s)).expect("report");
        assert!(r.impact_factor < 0.8, "{r:#?}");
        let c = r.cpu_taken.expect("switch records name the next task");
        assert_eq!(c.throttled_share_before, 0.0, "{c:?}");
        if quota {
            assert_quota_verdict(&r);
            assert!(c.throttled && c.throttled_share_after > 0.25, "{c:?}");
            assert!(r.hint.starts_with("A CPU quota throttles"), "{}", r.hint);
        } else {
            assert_eq!(
                (r.verdict, r.decided_by),
                (Verdict::Internal, DecisionPath::ImpactFactor),
                "{r:#?}"
            );
            assert!(!c.throttled && c.throttled_share_after == 0.0, "{c:?}");
        }
    }
}

/// A throttled target is an anomaly though no call shows one: a quota delays requests
/// between calls, and one busy thread has no peer to corroborate (measured: nginx's one
/// worker under a cap, client p99 ×22 to ×39, no lasting outlier). On demand from the
/// alarm; in continuous mode from where the throttling began. An alarm before the quota,
/// or a target with none, reads `none`.
#[test]
fn a_throttled_target_is_an_anomaly_without_outliers() {
    let s = stream(false);
    let from = fault_start_ns(&s);
    let (s, events) = with_switches(s, switches(true, spell(from..u64::MAX)));
    let (reports, mut engine) = run(&events);
    // The cadence's reports end within a tick of the fault's start, before the quota has
    // lasted `persistence_seconds`.
    assert!(!reports.is_empty());
    assert!(
        reports
            .iter()
            .all(|r| r.verdict == Verdict::None && r.window_end_ns < from + 1_000_000_000),
        "{:#?}",
        reports.iter().find(|r| r.verdict != Verdict::None)
    );
    let alarm = fault_start_ns(&s) + 5_000_000_000;
    let r = engine.trigger("svc", alarm).expect("report");
    assert_quota_verdict(&r);
    assert_eq!(r.anomaly_onset_ns, Some(alarm), "{r:#?}");
    assert!(r.cpu_taken.is_some_and(|c| c.throttled), "{r:#?}");
    let early = engine
        .trigger("svc", fault_start_ns(&s) - 5_000_000_000)
        .expect("report");
    assert_eq!(early.verdict, Verdict::None, "{early:#?}");
    // Continuous: the end of the stream, 10 s into the quota.
    let r = engine.finish().pop().expect("report");
    assert_quota_verdict(&r);
    let onset = r.anomaly_onset_ns.expect("an onset");
    // Within one of the 0.35-s bins the scheduler's account keeps.
    assert!(onset.abs_diff(from) < 400_000_000, "{onset} vs {from}");
    assert!(r.cpu_taken.is_some_and(|c| c.throttled), "{r:#?}");

    let (_, events) = with_switches(stream(false), switches(false, spell(from..u64::MAX)));
    let (_, mut engine) = run(&events);
    let r = engine.trigger("svc", alarm).expect("report");
    assert_eq!(r.verdict, Verdict::None, "{r:#?}");
    let r = engine.finish().pop().expect("report");
    assert_eq!(r.verdict, Verdict::None, "{r:#?}");
}

/// In continuous mode a quota is news while it throttles, once it has lasted
/// `persistence_seconds`: one that stopped before the latest data (a cap lifted) reads
/// `none`, as do a target throttled from its first record (no span before to have risen
/// from) and a burst of 1.5 s at the latest data, while a quota that began within the
/// window reads external.
#[test]
fn continuous_mode_reports_a_quota_while_it_throttles() {
    let s = stream(false);
    let from = fault_start_ns(&s);
    let cases = [
        (from - 20_000_000_000..from - 15_000_000_000, Verdict::None),
        (0..u64::MAX, Verdict::None),
        (from + 8_500_000_000..u64::MAX, Verdict::None),
        // 1.2 s across the border of the last two spans, ending 2.2 s before the latest
        // data: each span holds enough throttled switches, but the throttling stopped.
        (from + 6_600_000_000..from + 7_800_000_000, Verdict::None),
        (from - 20_000_000_000..u64::MAX, Verdict::External),
    ];
    for (during, verdict) in cases {
        let (_, events) = with_switches(stream(false), switches(true, vec![during.clone()]));
        let (_, mut engine) = run(&events);
        let r = engine.finish().pop().expect("report");
        assert_eq!(r.verdict, verdict, "{during:?}: {r:#?}");
        if verdict == Verdict::External {
            assert_quota_verdict(&r);
            let onset = r.anomaly_onset_ns.expect("an onset");
            assert!(
                onset.abs_diff(during.start) < 400_000_000,
                "{during:?}: {r:#?}"
            );
        }
    }
}

/// A quota that lasts longer than the window is reported for as long as it throttles:
/// once no span before it is left in the window, the share it rose from is the one an
/// earlier cadence report measured; a lull of 8 s does not end it, nor does a slowdown of
/// some threads that τ alone reads internal. A target throttled from its first record
/// never had a share before, and stays `none` however long it runs.
#[test]
fn a_quota_longer_than_the_window_is_reported_while_it_lasts() {
    const QUOTA_AT_NS: u64 = 30_000_000_000;
    let long = |subset: bool| StreamSpec {
        seconds: 150.0,
        ..stream(subset)
    };
    let s = long(false);
    let quota = s.start_ns + QUOTA_AT_NS;
    // Over the tick at 100 s, whose report then has no quota to show.
    let lull = s.start_ns + 96_000_000_000..s.start_ns + 104_000_000_000;
    let spells = [
        spell(quota..u64::MAX),
        vec![quota..lull.start, lull.end..u64::MAX],
    ];
    for (subset, during) in [(false, &spells[0]), (false, &spells[1]), (true, &spells[0])] {
        let (_, events) = with_switches(long(subset), switches(true, during.clone()));
        let (reports, mut engine) = run(&events);
        let in_lull = |r: &Report| {
            during.len() > 1 && r.window_end_ns >= lull.start && r.window_end_ns < lull.end
        };
        let after: Vec<&Report> = reports
            .iter()
            .filter(|r| r.window_end_ns >= quota + 5_000_000_000 && !in_lull(r))
            .collect();
        assert!(reports.iter().filter(|r| in_lull(r)).count() <= 1);
        // Ticks up to 140 s: the last ones' windows begin after the quota did.
        assert!(
            after
                .iter()
                .any(|r| r.window_start_ns > quota + 5_000_000_000),
            "{after:#?}"
        );
        for r in after.iter().copied().chain(engine.finish().first()) {
            assert_quota_verdict(r);
            let c = r.cpu_taken.expect("switch records");
            assert_eq!(c.throttled_share_before, 0.0, "{c:?}");
        }
        assert!(reports
            .iter()
            .filter(|r| r.window_end_ns < quota)
            .all(|r| r.verdict == Verdict::None));
    }

    let (_, events) = with_switches(long(false), switches(true, spell(0..u64::MAX)));
    let (reports, mut engine) = run(&events);
    assert!(reports.len() >= 14, "{}", reports.len());
    for r in reports.iter().chain(engine.finish().first()) {
        assert_eq!(r.verdict, Verdict::None, "{r:#?}");
    }
}

/// A runaway thread inside a capped group is what uses its quota up: the burner rule
/// wins and the verdict stays internal.
#[test]
fn a_runaway_in_a_capped_group_stays_internal() {
    let s = stream(false);
    let from = fault_start_ns(&s);
    let (s, mut events) = with_switches(s, switches(true, spell(from..u64::MAX)));
    let burner = s.pid + 3;
    add_burner(&mut events, &s, burner, from);
    let (_, mut engine) = run(&events);
    let r = engine.trigger("svc", from + 5_000_000_000).expect("report");
    assert_eq!(
        (r.verdict, r.decided_by),
        (Verdict::Internal, DecisionPath::CpuBurner),
        "{r:#?}"
    );
    assert!(r.cpu_burners.iter().any(|b| b.tid == burner), "{r:#?}");
}

/// A target throttled all along has no new quota to blame: the rise over the spans before
/// is what counts, so a slowdown of some threads keeps τ's internal verdict.
#[test]
fn a_target_throttled_all_along_keeps_taus_verdict() {
    let s = stream(true);
    let (s, events) = with_switches(s, switches(true, spell(0..u64::MAX)));
    let (_, mut engine) = run(&events);
    let r = engine.trigger("svc", fault_start_ns(&s)).expect("report");
    let c = r.cpu_taken.expect("switch records name the next task");
    assert!(c.throttled_share_before > 0.25, "{c:?}");
    assert!(!c.throttled, "{c:?}");
    assert_eq!(
        (r.verdict, r.decided_by),
        (Verdict::Internal, DecisionPath::ImpactFactor),
        "{r:#?}"
    );
    // Throttled from its first record, an alarm 3 s in has no span before to rise from.
    let r = engine
        .trigger("svc", s.start_ns + 3_000_000_000)
        .expect("report");
    assert_eq!(r.verdict, Verdict::None, "{r:#?}");
}

/// An alarm whose target was throttled in the seconds before it is the quota's, though the
/// calls' outliers came only later than α after it (which alone would not be the alarm's
/// anomaly).
#[test]
fn a_quota_before_the_alarm_answers_it_when_the_outliers_come_later() {
    let s = stream(true);
    // The fault 3.8 s after the alarm: its outliers are corroborated within the span an
    // alarm's anomaly may begin in (α + persistence), but more than α late for every
    // thread.
    let alarm = fault_start_ns(&s) - 3_800_000_000;
    let (_, events) = with_switches(s, switches(true, spell(alarm - 5_000_000_000..u64::MAX)));
    let (_, mut engine) = run(&events);
    let r = engine.trigger("svc", alarm).expect("report");
    assert_quota_verdict(&r);
    assert_eq!(r.anomaly_onset_ns, Some(alarm), "{r:#?}");

    let (_, events) = with_switches(
        stream(true),
        switches(false, spell(alarm - 5_000_000_000..u64::MAX)),
    );
    let (_, mut engine) = run(&events);
    let r = engine.trigger("svc", alarm).expect("report");
    assert_eq!(r.verdict, Verdict::None, "late outliers alone: {r:#?}");
}
