//! The JSON-lines sink writes one complete, parseable report per line, flushed at once.

use std::io::{BufRead, BufReader};

use faultline::pipeline::report_sink::ReportSink;
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
    let mut sink = JsonLinesSink::open(Some(&path)).unwrap();
    let a = report("db", Verdict::None);
    let b = report("web", Verdict::Internal);
    sink.publish(&a).unwrap();
    // Visible before any explicit flush or drop: a crash must not lose published reports.
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
    let mut sink = JsonLinesSink::open(Some(&path)).unwrap();
    sink.publish(&a).unwrap();
    let n = BufReader::new(std::fs::File::open(&path).unwrap())
        .lines()
        .count();
    assert_eq!(n, 3);
}
