//! Packet loss from the kernel's TCP account (`net_loss::LossTest`): a rising share of
//! retransmitted segments is the environment's doing, even when no call slows (a
//! non-blocking server's sends return at once; the kernel retransmits behind them).
//! Generated streams with a segment record each second, as the plugin's sampler of
//! `/proc/<pid>/net/snmp` makes them.

use faultline_engine::report::{DecisionPath, Report, Subsystem, Verdict};
use faultline_engine::synth::StreamSpec;
use faultline_engine::{Engine, Params, SyscallEvent};
use std::ops::Range;

#[path = "common/ticks.rs"]
#[allow(dead_code)] // (the CPU burner is for the quota and paging tests)
mod ticks;
use ticks::{fault_start_ns, run, slowdown, stream, IDLE};

const S: u64 = 1_000_000_000;

/// Segments sent a second.
const SENT: u64 = 1_000;

/// `s`'s calls and scheduler records (the CPU left idle at every switch), plus a segment
/// record at the end of every second: `SENT` segments, a tenth of them retransmitted
/// within `loss`, one in every fifth second otherwise (a healthy path's odd
/// retransmission).
fn with_segments(s: &StreamSpec, loss: Range<u64>) -> Vec<SyscallEvent> {
    with_segments_every(s, loss, 5)
}

/// [`with_segments`] with the odd retransmission every `every` seconds outside `loss`.
fn with_segments_every(s: &StreamSpec, loss: Range<u64>, every: u64) -> Vec<SyscallEvent> {
    let mut events = ticks::with_ticks(s, |tid, at, _| {
        SyscallEvent::off_cpu_to(s.pid, tid, at, false, IDLE)
    });
    events.extend(segments_every(s, loss, every));
    events.sort_by_key(|e| e.ts_ns);
    events
}

/// The segment records alone (see [`with_segments`]).
fn segments(s: &StreamSpec, loss: Range<u64>) -> Vec<SyscallEvent> {
    segments_every(s, loss, 5)
}

fn segments_every(s: &StreamSpec, loss: Range<u64>, every: u64) -> Vec<SyscallEvent> {
    let secs = s.seconds as u64;
    (1..=secs)
        .map(|i| {
            let at = s.start_ns + i * S;
            let retransmitted = if loss.contains(&at) {
                SENT / 10
            } else {
                u64::from(i % every == 0)
            };
            SyscallEvent::tcp_segments(s.pid, at, SENT, retransmitted)
        })
        .collect()
}

fn assert_loss_verdict(r: &Report) {
    assert_eq!(
        (r.verdict, r.decided_by, r.subsystem),
        (
            Verdict::External,
            DecisionPath::PacketLoss,
            Subsystem::NetworkIo
        ),
        "{r:#?}"
    );
    let l = r.tcp_retransmits.expect("segment records");
    assert!(
        l.lossy && l.share_after > 0.05 && l.share_before < 0.01,
        "{l:?}"
    );
    assert!(r.hint.starts_with("Packets are being lost"), "{}", r.hint);
}

/// Loss with no call slowed is an anomaly: on demand from the alarm, in continuous mode
/// from where the retransmissions began. An alarm before the loss, or a path without
/// one, reads `none`.
#[test]
fn packet_loss_is_an_environment_fault_though_no_call_slows() {
    let s = stream(21, None);
    let from = fault_start_ns(&s);
    let events = with_segments(&s, from..u64::MAX);
    let (reports, mut engine) = run(&events);
    assert!(!reports.is_empty());
    assert!(
        reports
            .iter()
            .filter(|r| r.window_end_ns < from)
            .all(|r| r.verdict == Verdict::None),
        "{:#?}",
        reports.iter().find(|r| r.verdict != Verdict::None)
    );
    let alarm = from + 5 * S;
    let r = engine.trigger("svc", alarm).expect("report");
    assert_loss_verdict(&r);
    assert_eq!(r.anomaly_onset_ns, Some(alarm), "{r:#?}");
    let early = engine.trigger("svc", from - 5 * S).expect("report");
    assert_eq!(early.verdict, Verdict::None, "{early:#?}");
    // Continuous: the end of the stream, 10 s into the loss; the onset within one of
    // the 0.35-s bins of the first record with a retransmission.
    let r = engine.finish().pop().expect("report");
    assert_loss_verdict(&r);
    let onset = r.anomaly_onset_ns.expect("an onset");
    assert!(onset.abs_diff(from) < 400_000_000, "{onset} vs {from}");

    let (reports, mut engine) = run(&with_segments(&s, 0..0));
    assert!(reports.iter().all(|r| r.verdict == Verdict::None));
    let r = engine.trigger("svc", alarm).expect("report");
    assert_eq!(r.verdict, Verdict::None, "{r:#?}");
    let r = engine.finish().pop().expect("report");
    assert_eq!(r.verdict, Verdict::None, "{r:#?}");
}

/// A healthy path retransmits in the odd burst (measured on Apache and nginx controls:
/// 16–19 segments in one second, a few times a minute), a loss in most seconds: a burst
/// in the span before the alarm, or at the latest data, is no loss.
#[test]
fn a_healthy_paths_burst_is_no_loss() {
    let s = stream(27, None);
    let from = fault_start_ns(&s);
    let mut events: Vec<SyscallEvent> = with_segments(&s, 0..0)
        .into_iter()
        .map(|e| match e.segments() {
            Some((sent, _)) if e.ts_ns == from + 4 * S || e.ts_ns == from + 9 * S => {
                SyscallEvent::tcp_segments(e.pid, e.ts_ns, sent, 19)
            }
            _ => e,
        })
        .collect();
    events.sort_by_key(|e| e.ts_ns);
    let (reports, mut engine) = run(&events);
    assert!(reports.iter().all(|r| r.verdict == Verdict::None));
    let r = engine.trigger("svc", from + 5 * S).expect("report");
    assert_eq!(r.verdict, Verdict::None, "{r:#?}");
    let r = engine.finish().pop().expect("report");
    assert_eq!(r.verdict, Verdict::None, "{r:#?}");
}

/// Samples that stop (the sampled process exited, its file became unreadable) say
/// nothing of the path now: continuous mode stops reporting the loss they showed.
#[test]
fn a_loss_is_not_reported_past_the_last_sample() {
    let s = stream(28, None);
    let from = fault_start_ns(&s);
    let events: Vec<SyscallEvent> = with_segments(&s, from - 20 * S..u64::MAX)
        .into_iter()
        .filter(|e| e.segments().is_none() || e.ts_ns <= from + 5 * S)
        .collect();
    let (reports, mut engine) = run(&events);
    assert!(
        reports
            .iter()
            .any(|r| r.verdict == Verdict::External && r.window_end_ns <= from + 5 * S),
        "reported while sampled"
    );
    let r = engine.finish().pop().expect("report");
    assert_eq!(r.verdict, Verdict::None, "{r:#?}");
}

/// A path that lost packets from the first record on has no span before to have risen
/// from, and one whose loss ended before the latest data is no longer news in
/// continuous mode; a burst under `persistence_seconds` is none either.
#[test]
fn continuous_mode_reports_loss_that_rose_and_lasts() {
    let s = stream(22, None);
    let from = fault_start_ns(&s);
    let cases = [
        (0..u64::MAX, Verdict::None),
        (from - 20 * S..from - 15 * S, Verdict::None),
        (from + 8 * S..u64::MAX, Verdict::None),
        (from - 20 * S..u64::MAX, Verdict::External),
    ];
    for (loss, verdict) in cases {
        let (_, mut engine) = run(&with_segments(&s, loss.clone()));
        let r = engine.finish().pop().expect("report");
        assert_eq!(r.verdict, verdict, "{loss:?}: {r:#?}");
        if verdict == Verdict::External {
            assert_loss_verdict(&r);
        }
    }
}

/// A loss that lasts longer than the window is reported while it lasts: once no span
/// before it is left in the window, the share it rose from is the one an earlier cadence
/// report measured. When it ends, the reports go back to `none`, also on a path that
/// goes on retransmitting a segment a second (under the count floor). A path that lost
/// packets from its first record never had a share before and stays `none`.
#[test]
fn a_loss_longer_than_the_window_is_reported_while_it_lasts() {
    let s = StreamSpec {
        seconds: 150.0,
        ..stream(25, None)
    };
    let loss = s.start_ns + 30 * S;
    let healed = s.start_ns + 135 * S;
    for every in [5, 1] {
        let (reports, _) = run(&with_segments_every(&s, loss..healed, every));
        let during: Vec<&Report> = reports
            .iter()
            .filter(|r| r.window_end_ns >= loss + 5 * S && r.window_end_ns < healed)
            .collect();
        // Ticks up to 130 s: the last ones' windows begin after the loss did.
        assert!(
            during.iter().any(|r| r.window_start_ns > loss + 5 * S),
            "{during:#?}"
        );
        for r in during {
            assert_loss_verdict(r);
        }
        assert!(reports
            .iter()
            .filter(|r| r.window_end_ns < loss || r.window_end_ns >= healed + 4 * S)
            .all(|r| r.verdict == Verdict::None));
    }

    let (reports, mut engine) = run(&with_segments(&s, 0..u64::MAX));
    assert!(reports.len() >= 14, "{}", reports.len());
    for r in reports.iter().chain(engine.finish().first()) {
        assert_eq!(r.verdict, Verdict::None, "{r:#?}");
    }
}

/// Loss turns a slowdown of some threads external (the network dropped their
/// segments, not a bug of theirs); without it τ's internal verdict stands, and the
/// report still says what the TCP account saw.
#[test]
fn loss_makes_a_local_looking_slowdown_external() {
    for lossy in [true, false] {
        let s = stream(23, Some(slowdown(0.25, 2.0)));
        let from = fault_start_ns(&s);
        let loss = if lossy { from..u64::MAX } else { 0..0 };
        let (_, mut engine) = run(&with_segments(&s, loss));
        let r = engine.trigger("svc", from).expect("report");
        assert!(r.impact_factor < 0.8, "{r:#?}");
        let l = r.tcp_retransmits.expect("segment records");
        if lossy {
            assert_eq!(r.decided_by, DecisionPath::PacketLoss, "{r:#?}");
            assert_eq!(r.verdict, Verdict::External);
            assert!(l.lossy, "{l:?}");
        } else {
            assert_eq!(
                (r.verdict, r.decided_by),
                (Verdict::Internal, DecisionPath::ImpactFactor),
                "{r:#?}"
            );
            assert!(!l.lossy, "{l:?}");
        }
    }
}

/// A service that stops accepting makes the kernel retransmit its handshakes while it
/// sends less: retransmissions rise as the segments sent collapse, which is its own
/// doing. τ's internal verdict stands, and no call-free anomaly is made of it.
#[test]
fn retransmissions_of_a_path_that_stopped_sending_are_no_environment_fault() {
    for slowed in [true, false] {
        let s = stream(30, slowed.then(|| slowdown(0.25, 2.0)));
        let from = fault_start_ns(&s);
        let events: Vec<SyscallEvent> = with_segments(&s, from..u64::MAX)
            .into_iter()
            .map(|e| match e.segments() {
                Some((sent, r)) if e.ts_ns >= from => {
                    SyscallEvent::tcp_segments(e.pid, e.ts_ns, sent / 10, r)
                }
                _ => e,
            })
            .collect();
        let (reports, mut engine) = run(&events);
        let r = engine.trigger("svc", from + 3 * S).expect("report");
        if slowed {
            assert_eq!(r.verdict, Verdict::Internal, "{r:#?}");
            let l = r.tcp_retransmits.expect("segment records");
            assert!(l.lossy && !l.steady, "{l:?}");
        } else {
            assert_eq!(r.verdict, Verdict::None, "{r:#?}");
            assert!(reports.iter().all(|r| r.verdict == Verdict::None));
        }
    }
}

/// When τ already says external, the loss does not decide the verdict, but it names
/// the subsystem and the hint: the slowed calls' own classes follow whichever calls the
/// lost segments delayed.
#[test]
fn loss_names_the_network_for_an_external_slowdown() {
    for lossy in [true, false] {
        let s = stream(26, Some(slowdown(1.0, 0.2)));
        let from = fault_start_ns(&s);
        let loss = if lossy { from..u64::MAX } else { 0..0 };
        let (_, mut engine) = run(&with_segments(&s, loss));
        let r = engine.trigger("svc", from).expect("report");
        assert_eq!(
            (r.verdict, r.decided_by),
            (Verdict::External, DecisionPath::ImpactFactor),
            "{r:#?}"
        );
        let named = r.hint.starts_with("Packets are being lost");
        if lossy {
            assert_eq!(r.subsystem, Subsystem::NetworkIo, "{r:#?}");
            assert!(named, "{}", r.hint);
        } else {
            assert!(!named, "{}", r.hint);
            assert!(r.tcp_retransmits.is_some_and(|l| !l.lossy), "{r:#?}");
        }
    }
}

/// A segment record stamped far from the target's clock (a corrupt line of a replayed
/// trace) is screened out as other records are, counted, and takes no bin from the
/// samples that follow.
#[test]
fn segment_records_far_from_the_clock_are_screened_out() {
    let s = stream(29, None);
    let from = fault_start_ns(&s);
    let events = with_segments(&s, from..u64::MAX);
    let (_, mut engine) = run(&events[..events.len() / 2]);
    let far = SyscallEvent::tcp_segments(s.pid, from + 7_200 * S, 1_000, 1_000);
    engine.ingest("svc", &[far]);
    assert_eq!(engine.counters().clock_outliers, 1);
    for chunk in events[events.len() / 2..].chunks(4096) {
        engine.ingest("svc", chunk);
    }
    assert_loss_verdict(&engine.trigger("svc", from + 5 * S).expect("report"));
    let samples = events.iter().filter(|e| e.segments().is_some()).count() as u64;
    assert_eq!(
        engine.counters().segment_records,
        samples,
        "the far one left out"
    );
}

/// Segment records of a process that made no call make no target (the sampler reads a
/// namespace for every process name in it): counted and left out.
#[test]
fn segment_records_alone_make_no_target() {
    let mut engine = Engine::new(Params::default()).expect("valid params");
    engine.ingest("sleep", &[SyscallEvent::tcp_segments(9, S, 1_000, 3)]);
    assert_eq!(engine.counters().untargeted_segment_records, 1);
    assert_eq!(engine.counters().segment_records, 0);
    assert!(engine.trigger("sleep", 2 * S).is_none());
    assert!(engine.finish().is_empty());
}

/// A sampler's batches (segment records alone) come in ahead of the calls' source: they
/// must not move the target's clock, or a cadence report would be cut before the calls
/// of its last seconds arrived. Fed 2 s ahead, the reports and verdicts are those of the
/// stream with the records in time order.
#[test]
fn a_samplers_batches_ahead_of_the_calls_do_not_move_the_clock() {
    let s = stream(24, None);
    let from = fault_start_ns(&s);
    let merged = with_segments(&s, from..u64::MAX);
    let (in_order, mut a) = run(&merged);

    let calls: Vec<SyscallEvent> = merged
        .iter()
        .copied()
        .filter(|e| e.segments().is_none())
        .collect();
    let samples = segments(&s, from..u64::MAX);
    let mut b = Engine::new(Params::default()).expect("valid params");
    let mut ahead = Vec::new();
    let mut next = samples.iter().peekable();
    for chunk in calls.chunks(4096) {
        let until = chunk.last().map_or(0, |e| e.ts_ns) + 2 * S;
        let batch: Vec<SyscallEvent> = std::iter::from_fn(|| next.next_if(|e| e.ts_ns <= until))
            .copied()
            .collect();
        if !batch.is_empty() {
            b.ingest("svc", &batch);
            assert!(b.take_reports().is_empty(), "a sampler batch made reports");
        }
        b.ingest("svc", chunk);
        ahead.extend(b.take_reports());
    }
    let ends = |r: &[Report]| r.iter().map(|r| r.window_end_ns).collect::<Vec<_>>();
    assert_eq!(ends(&in_order), ends(&ahead));
    let verdicts = |r: &[Report]| r.iter().map(|r| r.verdict).collect::<Vec<_>>();
    assert_eq!(verdicts(&in_order), verdicts(&ahead));
    let (ra, rb) = (
        a.trigger("svc", from + 5 * S).expect("report"),
        b.trigger("svc", from + 5 * S).expect("report"),
    );
    assert_loss_verdict(&ra);
    assert_loss_verdict(&rb);
    // Those ahead of the target's first calls found no target yet (counted).
    let (ca, cb) = (a.counters(), b.counters());
    assert!(cb.untargeted_segment_records > 0);
    assert_eq!(
        ca.segment_records,
        cb.segment_records + cb.untargeted_segment_records
    );
}
