//! The JSON-lines sink writes one complete, parseable report per line, flushed at once;
//! behind a reader that stalls, the caller (the engine thread) never blocks, what does not
//! fit the queue is refused and counted, what was queued is written in order once the
//! reader resumes, and dropping the sink (shutdown) writes it all.

use std::io::{self, BufRead, BufReader, Write};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use faultline::pipeline::report_sink::ReportSink;
use faultline::pipeline::telemetry::Telemetry;
use faultline::sinks::jsonl::{JsonLinesSink, QUEUE_REPORTS};
use faultline_engine::report::{
    DecisionPath, EngineCounters, OnsetDistribution, ThreadCounts, Trigger, REPORT_SCHEMA_VERSION,
};
use faultline_engine::{Params, Report, Subsystem, Verdict};

fn report(target: &str, verdict: Verdict) -> Report {
    // Built through serde so fields the engine adds later (all `#[serde(default)]`)
    // do not break this test.
    let v = serde_json::json!({
        "schema_version": REPORT_SCHEMA_VERSION,
        "target": target,
        "trigger": Trigger::EndOfStream,
        "window_start_ns": 5,
        "window_end_ns": 10,
        "anomaly_onset_ns": null,
        "verdict": verdict,
        "decided_by": DecisionPath::NoAnomaly,
        "impact_factor": 0.0,
        "impact_factor_filtered": null,
        "onset_dispersion_seconds": 0.0,
        "threads": ThreadCounts::default(),
        "onset_times_seconds": OnsetDistribution::default(),
        "top_syscalls_by_time": [],
        "top_syscalls_by_frequency": [],
        "subsystem": Subsystem::None,
        "hint": "line one\nline two",
        "syscalls": [],
        "events_analyzed": 0,
        "counters": EngineCounters::default(),
        "parameters": Params::default(),
    });
    serde_json::from_value(v).unwrap()
}

#[test]
fn each_report_is_one_flushed_line_that_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reports.jsonl");
    let mut sink = JsonLinesSink::open(Some(&path), Arc::default()).unwrap();
    let a = report("db", Verdict::None);
    let b = report("web", Verdict::Internal);
    sink.publish(&a).unwrap();
    // Visible once written, before any explicit flush or drop: a crash must not lose
    // written reports.
    assert!(sink.wait_written(Duration::from_secs(30)));
    let lines: Vec<String> = BufReader::new(std::fs::File::open(&path).unwrap())
        .lines()
        .map(Result::unwrap)
        .collect();
    assert_eq!(lines.len(), 1);
    sink.publish(&b).unwrap();
    drop(sink);

    let lines: Vec<Report> = BufReader::new(std::fs::File::open(&path).unwrap())
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    assert_eq!(lines, vec![a.clone(), b]);

    // Appends: a restarted plugin does not truncate earlier reports.
    let mut sink = JsonLinesSink::open(Some(&path), Arc::default()).unwrap();
    sink.publish(&a).unwrap();
    assert!(sink.wait_written(Duration::from_secs(30)));
    let n = BufReader::new(std::fs::File::open(&path).unwrap())
        .lines()
        .count();
    assert_eq!(n, 3);
}

/// A writer that takes `budget` more bytes, then fails one write and recovers.
#[derive(Clone, Default)]
struct Flaky {
    data: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    budget: std::sync::Arc<std::sync::Mutex<Option<usize>>>,
}

impl std::io::Write for Flaky {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut budget = self.budget.lock().unwrap();
        let n = match *budget {
            None => buf.len(),
            Some(0) => {
                *budget = None;
                return Err(std::io::Error::other("disk full"));
            }
            Some(b) => {
                let n = b.min(buf.len());
                *budget = Some(b - n);
                n
            }
        };
        self.data.lock().unwrap().extend_from_slice(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_failed_write_never_joins_the_next_report_to_its_fragment() {
    let out = Flaky::default();
    let telemetry = Arc::new(Telemetry::default());
    let mut sink = JsonLinesSink::new(Box::new(out.clone()), telemetry.clone()).unwrap();
    let reports: Vec<Report> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|t| report(t, Verdict::External))
        .collect();
    // Written by the sink's thread: each waited for, so the budget applies to one report.
    let mut publish = |r: &Report| {
        sink.publish(r).expect("queued");
        assert!(sink.wait_written(Duration::from_secs(30)));
        sink.stats().failed
    };
    assert_eq!(publish(&reports[0]), 0, "a written");
    // b: 100 bytes go out, then the write fails mid-line.
    *out.budget.lock().unwrap() = Some(100);
    assert_eq!(publish(&reports[1]), 1, "b failed");
    assert_eq!(publish(&reports[2]), 1, "c written");
    // d: fails before writing anything, so no fragment and no extra line.
    *out.budget.lock().unwrap() = Some(0);
    assert_eq!(publish(&reports[3]), 2, "d failed");
    assert_eq!(publish(&reports[4]), 2, "e written");
    assert_eq!(telemetry.sink_errors(), [("json", 2)], "failures counted");

    let text = String::from_utf8(out.data.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    let b_json = serde_json::to_string(&reports[1]).unwrap();
    assert_eq!(lines[1], &b_json[..100], "b's fragment alone on its line");
    for (line, want) in [
        (lines[0], &reports[0]),
        (lines[2], &reports[2]),
        (lines[3], &reports[4]),
    ] {
        let got: Report = serde_json::from_str(line).expect("a whole report per line");
        assert_eq!(&got, want);
    }
}

/// Generous: only reached when something is broken.
const WAIT: Duration = Duration::from_secs(30);

fn names(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("r{i}")).collect()
}

#[derive(Default)]
struct GateState {
    open: bool,
    /// Writes started (each blocks while the gate is closed).
    entered: usize,
    data: Vec<u8>,
}

/// A reader that stalls: every write waits until the gate opens.
#[derive(Clone, Default)]
struct Gate(Arc<(Mutex<GateState>, Condvar)>);

impl Gate {
    fn state(&self) -> MutexGuard<'_, GateState> {
        self.0 .0.lock().expect("gate lock")
    }

    /// Waits until `n` writes have started; whether they have within [`WAIT`].
    fn wait_entered(&self, n: usize) -> bool {
        let (s, _) = self
            .0
             .1
            .wait_timeout_while(self.state(), WAIT, |s| s.entered < n)
            .expect("gate lock");
        s.entered >= n
    }

    fn open(&self) {
        self.state().open = true;
        self.0 .1.notify_all();
    }

    /// The targets of the reports written so far, in order.
    fn targets(&self) -> Vec<String> {
        String::from_utf8(self.state().data.clone())
            .expect("utf-8")
            .lines()
            .map(|l| {
                serde_json::from_str::<Report>(l)
                    .expect("a whole report")
                    .target
            })
            .collect()
    }
}

impl Write for Gate {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut s = self.state();
        s.entered += 1;
        self.0 .1.notify_all();
        while !s.open {
            s = self.0 .1.wait(s).expect("gate lock");
        }
        s.data.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_stalled_reader_never_blocks_publish_and_what_overflows_is_refused() {
    const EXTRA: usize = 40;
    let fed = 1 + QUEUE_REPORTS + EXTRA;
    let gate = Gate::default();
    let telemetry = Arc::new(Telemetry::default());
    let mut sink = JsonLinesSink::new(Box::new(gate.clone()), telemetry.clone()).expect("starts");

    // On a thread of its own, so a publish that blocks fails the test instead of hanging it.
    let (done, finished) = mpsc::channel();
    let writer_gate = gate.clone();
    std::thread::spawn(move || {
        sink.publish(&report("r0", Verdict::None)).expect("queued");
        // The writer holds r0 and is stuck writing it: the queue alone takes the rest.
        if !writer_gate.wait_entered(1) {
            return;
        }
        let refused: Vec<usize> = (1..fed)
            .filter(|i| {
                sink.publish(&report(&format!("r{i}"), Verdict::None))
                    .is_err()
            })
            .collect();
        let _ = done.send((sink, refused));
    });
    let (sink, refused) = finished
        .recv_timeout(WAIT)
        .expect("every publish returned while the reader stalls");

    // All returned while the writer is still blocked in its first write.
    assert_eq!(gate.state().entered, 1);
    let s = sink.stats();
    assert_eq!(s.written, 0);
    assert_eq!(s.pending, QUEUE_REPORTS as u64 + 1, "r0 and a full queue");
    assert_eq!(s.dropped, fed as u64 - s.written - s.pending);
    // The newest are the ones refused, each with an error the engine task counts.
    assert_eq!(refused, (QUEUE_REPORTS + 1..fed).collect::<Vec<_>>());

    // The reader resumes: everything queued comes out, in order.
    gate.open();
    assert!(sink.wait_written(WAIT));
    assert_eq!(gate.targets(), names(0..QUEUE_REPORTS + 1));
    let s = sink.stats();
    assert_eq!(
        (s.written, s.failed, s.pending),
        (QUEUE_REPORTS as u64 + 1, 0, 0)
    );
    assert!(telemetry.sink_errors().iter().all(|(_, n)| *n == 0));
}

#[test]
fn dropping_the_sink_waits_until_everything_queued_is_written() {
    let gate = Gate::default();
    let telemetry = Arc::new(Telemetry::default());
    let mut sink = JsonLinesSink::new(Box::new(gate.clone()), telemetry.clone())
        .expect("starts")
        .with_shutdown_wait(WAIT);
    for t in names(0..10) {
        sink.publish(&report(&t, Verdict::None)).expect("queued");
    }
    let dropping = std::thread::spawn(move || drop(sink));
    assert!(gate.wait_entered(1));
    // The reader still stalls: the drop (the shutdown's last step) is still waiting.
    std::thread::sleep(Duration::from_millis(200));
    assert!(!dropping.is_finished(), "the drop waits for the writer");
    gate.open();
    dropping.join().expect("dropped");
    // Everything was written by the time the drop returned.
    assert_eq!(gate.targets(), names(0..10));
    assert!(telemetry.sink_errors().iter().all(|(_, n)| *n == 0));
}

#[test]
fn a_reader_stalled_past_the_shutdown_wait_loses_the_rest_counted() {
    let gate = Gate::default();
    let telemetry = Arc::new(Telemetry::default());
    let mut sink = JsonLinesSink::new(Box::new(gate.clone()), telemetry.clone())
        .expect("starts")
        .with_shutdown_wait(Duration::from_millis(50));
    for t in names(0..5) {
        sink.publish(&report(&t, Verdict::None)).expect("queued");
    }
    assert!(gate.wait_entered(1));
    drop(sink);
    // The one being written and the four queued.
    assert_eq!(telemetry.sink_errors(), [("json", 5)]);
    // Given up on: a reader that resumes late gets nothing the count called lost, but the
    // write that was under way.
    gate.open();
    std::thread::sleep(Duration::from_millis(200));
    assert!(gate.targets().len() <= 1, "{:?}", gate.targets());
}
