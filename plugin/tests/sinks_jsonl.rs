//! The JSON-lines sink writes one complete, parseable report per line, flushed at once.

use std::io::{BufRead, BufReader};
use std::sync::Arc;
use std::time::Duration;

use faultline::pipeline::report_sink::ReportSink;
use faultline::pipeline::telemetry::Telemetry;
use faultline::sinks::jsonl::JsonLinesSink;
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
