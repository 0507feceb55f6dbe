//! The Prometheus sink's exposition: per-target series from reports, caps counted,
//! stale ranking series removed, pipeline counters exported.

mod prereq;

use std::sync::Arc;

use faultline::config::PrometheusSinkConfig;
use faultline::pipeline::report_sink::ReportSink;
use faultline::pipeline::telemetry::{DropReason, SegmentCounts, Telemetry, TrapReason};
use faultline::sinks::prometheus;
use faultline_engine::report::{
    DecisionPath, EngineCounters, OnsetDistribution, RankedSyscall, SyscallActivity, ThreadCounts,
    Trigger, REPORT_SCHEMA_VERSION,
};
use faultline_engine::symptoms::{CounterTotals, Symptom};
use faultline_engine::vital_signs::{SignRates, ThreadSigns, VitalSigns};
use faultline_engine::{Params, Report, Subsystem, Verdict};

fn ranked(names: &[(&str, f64)]) -> Vec<RankedSyscall> {
    names
        .iter()
        .map(|(n, r)| RankedSyscall {
            syscall: (*n).to_owned(),
            increase_ratio: *r,
            subsystem: Subsystem::DiskIo,
        })
        .collect()
}

fn report(target: &str, verdict: Verdict, by_time: &[(&str, f64)]) -> Report {
    // Built through serde so fields the engine adds later (all `#[serde(default)]`)
    // do not break this test.
    let v = serde_json::json!({
        "schema_version": REPORT_SCHEMA_VERSION,
        "target": target,
        "trigger": Trigger::Cadence,
        "window_start_ns": 1_000_000_000u64,
        "window_end_ns": 91_000_000_000u64,
        "anomaly_onset_ns": 42_500_000_000u64,
        "verdict": verdict,
        "decided_by": DecisionPath::ImpactFactor,
        "impact_factor": 0.95,
        "impact_factor_filtered": null,
        "onset_dispersion_seconds": 0.125,
        "threads": ThreadCounts { total: 40, affected: 39, directly_affected: 38 },
        "affected_threads": [
            {"tid": 11, "onset_seconds": 0.1, "syscall": "read", "channel": "time", "lost_share": 0.5},
            {"tid": 12, "onset_seconds": 0.2, "syscall": "read", "channel": "time", "lost_share": 0.125},
            {"tid": 13, "onset_seconds": 0.3, "syscall": "write", "channel": "time", "lost_share": 0.25}
        ],
        "onset_times_seconds": OnsetDistribution::default(),
        "top_syscalls_by_time": ranked(by_time),
        "top_syscalls_by_frequency": ranked(&[("read", 0.5), ("write", 0.25)]),
        "subsystem": Subsystem::DiskIo,
        "hint": "disk \"slow\"\nsee report",
        "syscalls": [
            SyscallActivity { syscall: "read".into(), calls: 1000, calls_per_second: 11.0, mean_latency_seconds: 0.002 },
            SyscallActivity { syscall: "write".into(), calls: 500, calls_per_second: 5.5, mean_latency_seconds: 0.004 },
            SyscallActivity { syscall: "futex".into(), calls: 10, calls_per_second: 0.1, mean_latency_seconds: 0.5 },
        ],
        "events_analyzed": 1510,
        "counters": EngineCounters::default(),
        "parameters": Params::default(),
    });
    serde_json::from_value(v).unwrap()
}

/// `r` with the vital signs of a target whose totals show `symptoms`, and a thread per
/// entry of `threads` (tid, its symptoms). Rates are given, not derived, so the test reads
/// the exported numbers back exactly; `switches_per_call` is left unmeasured.
fn with_vital_signs(mut r: Report, symptoms: &[Symptom], threads: &[(u32, &[Symptom])]) -> Report {
    let totals = CounterTotals {
        calls: 40,
        cycles: 9_000_000_000,
        instructions: 18_000_000_000,
        cache_misses: 1_800,
        context_switches: 0,
        wall_ns: 3_000_000_000,
    };
    let rates = SignRates {
        cycles_per_ns: Some(3.0),
        ipc: Some(2.0),
        mpki: Some(0.0001),
        calls_per_mcycle: Some(0.0044),
        switches_per_call: None,
    };
    r.vital_signs = Some(VitalSigns {
        totals,
        rates,
        symptoms: symptoms.to_vec(),
        threads: threads
            .iter()
            .map(|(tid, s)| ThreadSigns {
                tid: *tid,
                totals,
                rates,
                symptoms: s.to_vec(),
            })
            .collect(),
    });
    r
}

/// The value of the sample whose line starts with `series` (name plus exact label text).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(series)?;
        rest.strip_prefix(' ')?.trim().parse().ok()
    })
}

#[test]
fn reports_become_capped_series_and_stale_rankings_disappear() {
    let telemetry = Arc::new(Telemetry::default());
    let cfg = PrometheusSinkConfig {
        max_targets: 1,
        max_syscalls: 2,
        ..PrometheusSinkConfig::default()
    };
    let (mut sink, exporter) = prometheus::new(&cfg, telemetry);

    let first = report(
        "db",
        Verdict::External,
        &[("fsync", 3.0), ("pwrite64", 2.0), ("read", 1.0)],
    );
    sink.publish(&first).unwrap();
    // A second target exceeds max_targets = 1.
    sink.publish(&report("web", Verdict::Internal, &[]))
        .unwrap();
    let text = exporter.encode().unwrap();

    assert!(
        text.trim_end().ends_with("# EOF"),
        "OpenMetrics must end with # EOF"
    );
    assert_eq!(
        sample(&text, r#"faultline_impact_factor_ratio{target="db"}"#),
        Some(0.95)
    );
    assert_eq!(
        sample(&text, r#"faultline_onset_dispersion_seconds{target="db"}"#),
        Some(0.125)
    );
    // The median of the affected threads' lost shares.
    assert_eq!(
        sample(&text, r#"faultline_time_lost_ratio{target="db"}"#),
        Some(0.25)
    );
    // A report without `silent_seconds` (the target makes calls) exports 0.
    assert_eq!(
        sample(&text, r#"faultline_silent_seconds{target="db"}"#),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"faultline_anomaly_onset_timestamp_seconds{target="db"}"#
        ),
        Some(42.5)
    );
    assert_eq!(
        sample(
            &text,
            r#"faultline_verdict{target="db",verdict="external"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"faultline_verdict{target="db",verdict="internal"}"#
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, r#"faultline_verdict{target="db",verdict="none"}"#),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"faultline_subsystem{target="db",subsystem="disk_io"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"faultline_threads{target="db",state="directly_affected"}"#
        ),
        Some(38.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"faultline_affected_syscall_increase_ratio{target="db",syscall="fsync",dimension="time",rank="1"}"#
        ),
        Some(3.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"faultline_affected_syscall_increase_ratio{target="db",syscall="write",dimension="frequency",rank="2"}"#
        ),
        Some(0.25)
    );
    assert_eq!(
        sample(
            &text,
            r#"faultline_syscall_mean_latency_seconds{target="db",syscall="write"}"#
        ),
        Some(0.004)
    );
    assert_eq!(
        sample(
            &text,
            r#"faultline_syscall_calls_per_second{target="db",syscall="read"}"#
        ),
        Some(11.0)
    );
    // Third-ranked and third-busiest syscalls are cut (max_syscalls = 2) ...
    assert!(!text.contains(r#"rank="3""#));
    assert!(!text.contains(r#"syscall="futex""#));
    // ... and so is every series of the second target.
    assert!(!text.contains(r#"target="web""#));
    // Cut: 1 ranked-by-time entry, 1 activity entry, 1 report of a target over the cap.
    assert_eq!(sample(&text, "faultline_series_capped_total"), Some(3.0));
    assert_eq!(sample(&text, "faultline_targets"), Some(1.0));
    // The hint is a label value: quotes and newlines are escaped, not breaking the line.
    assert!(
        text.contains(r#"hint="disk \"slow\"\nsee report""#),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            r#"faultline_reports_total{target="db",trigger="cadence"}"#
        ),
        Some(1.0)
    );

    // The ranking changes: fsync leaves it, its series must go. The target has also gone
    // quiet: 25 s without a call at the end of the window.
    let mut second = report("db", Verdict::None, &[("futex", 0.7)]);
    second.silent_seconds = 25.0;
    sink.publish(&second).unwrap();
    let text = exporter.encode().unwrap();
    assert!(
        !text.contains(r#"syscall="fsync""#),
        "stale series kept: {text}"
    );
    assert_eq!(
        sample(
            &text,
            r#"faultline_affected_syscall_increase_ratio{target="db",syscall="futex",dimension="time",rank="1"}"#
        ),
        Some(0.7)
    );
    assert_eq!(
        sample(&text, r#"faultline_verdict{target="db",verdict="none"}"#),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, r#"faultline_silent_seconds{target="db"}"#),
        Some(25.0)
    );
    assert!(
        text.contains("# TYPE faultline_silent_seconds gauge"),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            r#"faultline_verdict{target="db",verdict="external"}"#
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"faultline_reports_total{target="db",trigger="cadence"}"#
        ),
        Some(2.0)
    );
}

#[test]
fn pipeline_counters_and_engine_timings_are_exported() {
    let telemetry = Arc::new(Telemetry::default());
    let (mut sink, exporter) = prometheus::new(&PrometheusSinkConfig::default(), telemetry.clone());
    let otlp = telemetry.source("otlp_grpc");
    otlp.add_received(1234);
    otlp.add_decode_errors(3);
    otlp.add_dropped(DropReason::QueueFull, 17);
    telemetry.add_guest_restart();
    telemetry.register_sink("json");
    telemetry.register_sink("otlp");
    telemetry.add_sink_error("json");
    telemetry.add_sink_error("json");
    sink.observe_engine_call(0.003);
    sink.observe_engine_call(0.5);

    let text = exporter.encode().unwrap();
    assert_eq!(
        sample(
            &text,
            r#"faultline_events_received_total{source="otlp_grpc"}"#
        ),
        Some(1234.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"faultline_decode_errors_total{source="otlp_grpc"}"#
        ),
        Some(3.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"faultline_events_dropped_total{source="otlp_grpc",reason="queue_full"}"#
        ),
        Some(17.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"faultline_events_dropped_total{source="otlp_grpc",reason="no_target"}"#
        ),
        Some(0.0)
    );
    assert_eq!(sample(&text, "faultline_guest_restarts_total"), Some(1.0));
    assert_eq!(
        sample(&text, "faultline_guest_restart_failures_total"),
        Some(0.0)
    );
    for r in TrapReason::ALL {
        let series = format!("faultline_guest_traps_total{{reason=\"{}\"}}", r.as_str());
        assert_eq!(sample(&text, &series), Some(0.0), "{series}: from 0");
    }
    assert_eq!(
        sample(&text, "faultline_guest_up"),
        None,
        "no guest gauges without a WASM engine"
    );
    assert_eq!(
        sample(&text, r#"faultline_sink_errors_total{sink="json"}"#),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, r#"faultline_sink_errors_total{sink="otlp"}"#),
        Some(0.0),
        "a sink's counter exists before its first failure"
    );
    assert_eq!(
        sample(&text, "faultline_analysis_duration_seconds_count"),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "faultline_analysis_duration_seconds_sum"),
        Some(0.503)
    );
    // Bucket boundaries are 10 µs × 4^k: 0.003 s falls in le=0.01024, 0.5 s in le=0.65536.
    assert_eq!(
        sample(
            &text,
            r#"faultline_analysis_duration_seconds_bucket{le="0.00256"}"#
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"faultline_analysis_duration_seconds_bucket{le="0.01024"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"faultline_analysis_duration_seconds_bucket{le="0.65536"}"#
        ),
        Some(2.0)
    );
}

#[test]
fn tcp_segment_tallies_are_exported_for_receivers_that_read_them() {
    let telemetry = Arc::new(Telemetry::default());
    let (_sink, exporter) = prometheus::new(&PrometheusSinkConfig::default(), telemetry.clone());
    let grpc = telemetry.source("otlp_grpc");
    let http = telemetry.source("otlp_http");
    telemetry.source("perf");
    grpc.segments().watch();
    http.segments().watch();
    grpc.segments().add(SegmentCounts {
        points: 20,
        unpaired: 1,
        gaps: 2,
        forgotten: 3,
    });

    let text = exporter.encode().unwrap();
    let got =
        |name: &str, source: &str| sample(&text, &format!(r#"{name}_total{{source="{source}"}}"#));
    for (name, want) in [
        ("faultline_otlp_tcp_segment_points", 20.0),
        ("faultline_otlp_tcp_segment_points_unpaired", 1.0),
        ("faultline_otlp_tcp_segment_gaps", 2.0),
        ("faultline_otlp_tcp_segment_series_forgotten", 3.0),
    ] {
        assert_eq!(got(name, "otlp_grpc"), Some(want), "{name}");
        assert_eq!(got(name, "otlp_http"), Some(0.0), "{name}: from 0");
        assert_eq!(
            got(name, "perf"),
            None,
            "{name}: no series for other sources"
        );
    }
}

#[test]
fn records_the_engine_left_out_for_their_time_are_exported() {
    let telemetry = Arc::new(Telemetry::default());
    let (mut sink, exporter) = prometheus::new(&PrometheusSinkConfig::default(), telemetry);
    // What an engine reports after a wild timestamp and a clock that jumped back.
    let mut e = faultline_engine::Engine::new(Params::default()).expect("valid");
    let at =
        |ts| faultline_engine::SyscallEvent::complete(1, 1, faultline_engine::SyscallId(1), ts, 5);
    let hour = faultline_engine::clock_screen::MAX_CLOCK_JUMP_NS;
    e.ingest("db", &[at(10 * hour)]);
    e.ingest("db", &[at(u64::MAX)]);
    let back: Vec<_> = (0..64).map(|i| at(hour + i)).collect();
    e.ingest("db", &back);
    sink.observe_engine_counters(&e.counters());

    let text = exporter.encode().unwrap();
    assert_eq!(
        sample(
            &text,
            r#"faultline_engine_irregular_records_total{kind="clock_outlier"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "faultline_engine_clock_resets_total"),
        Some(1.0)
    );
}

#[test]
fn dropped_events_help_lists_every_reason() {
    let telemetry = Arc::new(Telemetry::default());
    let (_sink, exporter) = prometheus::new(&PrometheusSinkConfig::default(), telemetry);
    let text = exporter.encode().unwrap();
    let help = text
        .lines()
        .find(|l| l.starts_with("# HELP faultline_events_dropped "))
        .expect("HELP line of faultline_events_dropped");
    for r in DropReason::ALL {
        assert!(
            help.contains(r.as_str()),
            "{} missing from {help}",
            r.as_str()
        );
    }
    // Batches the engine failed to ingest (counted by the engine task).
    assert!(help.contains("engine_error"), "{help}");
}

#[test]
fn reports_the_report_store_refused_are_exported() {
    use faultline::pipeline::latest::LatestReports;
    use faultline::sinks::http::{router, HttpState};

    let telemetry = Arc::new(Telemetry::default());
    let (_sink, exporter) = prometheus::new(&PrometheusSinkConfig::default(), telemetry);
    let latest = Arc::new(LatestReports::new(1));
    let (commands, _rx) = tokio::sync::mpsc::channel(1);
    let _routes = router(HttpState {
        exporter: exporter.clone(),
        latest: latest.clone(),
        commands,
        engine_alive: Arc::new(std::sync::atomic::AtomicBool::new(true)),
    });
    let text = exporter.encode().unwrap();
    assert_eq!(
        sample(&text, "faultline_report_store_capped_total"),
        Some(0.0)
    );
    latest.insert(&report("db", Verdict::External, &[("read", 1.0)]));
    latest.insert(&report("web", Verdict::None, &[]));
    latest.insert(&report("api", Verdict::None, &[]));
    assert_eq!(latest.capped(), 2);
    let text = exporter.encode().unwrap();
    assert_eq!(
        sample(&text, "faultline_report_store_capped_total"),
        Some(2.0)
    );
}

#[test]
fn vital_signs_and_symptoms_follow_the_latest_report() {
    use Symptom::{BusyLoop, CacheThrash};
    let telemetry = Arc::new(Telemetry::default());
    let (mut sink, exporter) = prometheus::new(&PrometheusSinkConfig::default(), telemetry);
    let spinning = with_vital_signs(
        report("db", Verdict::Internal, &[]),
        &[BusyLoop],
        &[
            (7, &[BusyLoop]),
            (9, &[BusyLoop, CacheThrash]),
            (11, &[CacheThrash]),
        ],
    );
    sink.publish(&spinning).unwrap();
    // A target whose source delivers no counters gets none of these series.
    sink.publish(&report("web", Verdict::None, &[])).unwrap();
    let text = exporter.encode().unwrap();

    for (sign, v) in [
        ("cycles_per_ns", 3.0),
        ("ipc", 2.0),
        ("mpki", 0.0001),
        ("calls_per_mcycle", 0.0044),
    ] {
        assert_eq!(
            sample(
                &text,
                &format!(r#"faultline_vital_sign{{target="db",sign="{sign}"}}"#)
            ),
            Some(v),
            "{sign}: {text}"
        );
    }
    assert!(
        !text.contains(r#"sign="switches_per_call""#),
        "an unmeasured sign is not exported as 0: {text}"
    );
    assert_eq!(
        sample(
            &text,
            r#"faultline_symptom{target="db",symptom="busy_loop"}"#
        ),
        Some(1.0)
    );
    assert!(
        !text.contains(r#"faultline_symptom{target="db",symptom="cache_thrash"}"#),
        "only the target's own symptoms: {text}"
    );
    assert_eq!(
        sample(
            &text,
            r#"faultline_symptom_threads{target="db",symptom="busy_loop"}"#
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"faultline_symptom_threads{target="db",symptom="cache_thrash"}"#
        ),
        Some(2.0)
    );
    assert!(!text.contains(r#"symptom="syscall_loop""#), "{text}");
    for name in [
        "faultline_vital_sign{",
        "faultline_symptom{",
        "faultline_symptom_threads{",
    ] {
        assert!(
            !text.contains(&format!(r#"{name}target="web""#)),
            "{name} of a target without counters: {text}"
        );
    }
    assert!(
        text.contains("# TYPE faultline_symptom_threads gauge"),
        "{text}"
    );

    // The spin ends: the next report still has counters but no symptom, so the symptom
    // series go while the vital signs stay.
    sink.publish(&with_vital_signs(
        report("db", Verdict::None, &[]),
        &[],
        &[],
    ))
    .unwrap();
    let text = exporter.encode().unwrap();
    assert!(
        !text.contains("faultline_symptom{"),
        "stale symptom: {text}"
    );
    assert!(
        !text.contains("faultline_symptom_threads{"),
        "stale symptom threads: {text}"
    );
    assert_eq!(
        sample(&text, r#"faultline_vital_sign{target="db",sign="ipc"}"#),
        Some(2.0)
    );

    // The counters stop (source changed): every vital-sign series of the target goes too.
    sink.publish(&report("db", Verdict::None, &[])).unwrap();
    let text = exporter.encode().unwrap();
    assert!(
        !text.contains("faultline_vital_sign{"),
        "stale sign: {text}"
    );
}

#[test]
fn counter_records_of_the_engine_are_exported() {
    let telemetry = Arc::new(Telemetry::default());
    let (mut sink, exporter) = prometheus::new(&PrometheusSinkConfig::default(), telemetry);
    sink.observe_engine_counters(&EngineCounters {
        counter_records: 1200,
        untracked_counter_records: 3,
        segment_records: 45,
        untargeted_segment_records: 2,
        ..EngineCounters::default()
    });
    let text = exporter.encode().unwrap();
    assert_eq!(
        sample(&text, "faultline_engine_counter_records_total"),
        Some(1200.0)
    );
    assert_eq!(
        sample(&text, "faultline_engine_untracked_counter_records_total"),
        Some(3.0)
    );
    assert_eq!(
        sample(&text, "faultline_engine_segment_records_total"),
        Some(45.0)
    );
    assert_eq!(
        sample(&text, "faultline_engine_untargeted_segment_records_total"),
        Some(2.0)
    );
}

/// Runs `promtool` with `args`, `stdin` on its standard input: (exit code, stdout,
/// stderr); `None` when promtool is not installed (a missing tool, see `prereq`).
fn promtool(args: &[&str], stdin: &str) -> Option<(Option<i32>, String, String)> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = match Command::new("promtool")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            prereq::missing_tool(&format!("promtool ({e})"), "apt-get install prometheus");
            return None;
        }
    };
    let mut input = child.stdin.take().expect("stdin piped");
    input
        .write_all(stdin.as_bytes())
        .expect("write to promtool");
    drop(input);
    let out = child.wait_with_output().expect("promtool runs");
    Some((
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// Lint findings of `promtool check metrics` that are deliberate: these counters count
/// records of *hardware counters* (the vital signs' input), which the lint's "a name
/// should not say `counter`" rule cannot tell from a type in the name.
const ACCEPTED_LINT: [&str; 2] = [
    "faultline_engine_counter_records_total metric name should not include type 'counter'",
    "faultline_engine_untracked_counter_records_total metric name should not include type 'counter'",
];

/// The exposition as a real Prometheus reads it, checked by promtool on the exporter's
/// output with every kind of series present (two targets' reports: rankings, verdicts,
/// vital signs, symptoms, the diagnosis info with an escaped hint; pipeline counters,
/// segment tallies, engine timings and counters). The hand-made parser of the other tests
/// ([`sample`]) reads values; this checks the format, twice:
/// - Prometheus's own OpenMetrics parser, the one a scrape of `/metrics` uses: `promtool
///   tsdb create-blocks-from openmetrics` must take every sample (it needs timestamps,
///   which are added at the end of each sample line).
/// - `promtool check metrics` (parse and lint: help text, types, names, units). It reads
///   the classic text format, where a counter's family is named like its samples
///   (`foo_total`) and OpenMetrics' `foo` would read as a counter without samples: the
///   `# HELP`/`# TYPE`/`# UNIT` lines of counters are renamed so, nothing else changes.
///
/// promtool comes with `apt-get install prometheus` (scripts/setup.sh).
#[test]
fn promtool_accepts_the_exposition_with_every_kind_of_series() {
    use Symptom::{BusyLoop, CacheThrash};
    let telemetry = Arc::new(Telemetry::default());
    let (mut sink, exporter) = prometheus::new(&PrometheusSinkConfig::default(), telemetry.clone());
    sink.publish(&with_vital_signs(
        report(
            "db",
            Verdict::External,
            &[("fsync", 3.0), ("pwrite64", 2.0), ("read", 1.0)],
        ),
        &[BusyLoop],
        &[(7, &[BusyLoop]), (9, &[BusyLoop, CacheThrash])],
    ))
    .unwrap();
    sink.publish(&report("web", Verdict::Internal, &[("futex", 5.0)]))
        .unwrap();
    let otlp = telemetry.source("otlp_grpc");
    otlp.add_received(1234);
    otlp.add_decode_errors(3);
    otlp.add_dropped(DropReason::QueueFull, 17);
    otlp.segments().watch();
    otlp.segments().add(SegmentCounts {
        points: 20,
        unpaired: 1,
        gaps: 2,
        forgotten: 3,
    });
    telemetry.source("perf").add_received(10);
    telemetry.add_guest_restart();
    telemetry.register_sink("json");
    telemetry.add_sink_error("json");
    sink.observe_engine_call(0.003);
    sink.observe_engine_call(0.5);
    sink.observe_engine_counters(&EngineCounters {
        counter_records: 1200,
        segment_records: 45,
        ..EngineCounters::default()
    });
    let text = exporter.encode().unwrap();
    // The series the check is about are there.
    for series in [
        r#"faultline_verdict{target="db",verdict="external"}"#,
        r#"faultline_impact_factor_ratio{target="web"}"#,
        r#"faultline_vital_sign{target="db",sign="ipc"}"#,
        r#"faultline_symptom{target="db",symptom="busy_loop"}"#,
        r#"faultline_events_received_total{source="otlp_grpc"}"#,
        r#"faultline_otlp_tcp_segment_points_total{source="otlp_grpc"}"#,
        "faultline_analysis_duration_seconds_count",
        "faultline_engine_counter_records_total",
    ] {
        assert!(sample(&text, series).is_some(), "no {series} in:\n{text}");
    }
    assert!(
        text.contains(r#"hint="disk \"slow\"\nsee report""#),
        "{text}"
    );

    // 1. Prometheus's OpenMetrics parser takes every sample.
    let samples = text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count();
    let stamped: String = text
        .lines()
        .map(|l| {
            if l.is_empty() || l.starts_with('#') {
                format!("{l}\n")
            } else {
                format!("{l} 1700000000\n")
            }
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("metrics.om");
    std::fs::write(&file, &stamped).unwrap();
    let blocks = dir.path().join("blocks");
    let Some((code, stdout, stderr)) = promtool(
        &[
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            file.to_str().unwrap(),
            blocks.to_str().unwrap(),
        ],
        "",
    ) else {
        return;
    };
    assert_eq!(code, Some(0), "{stdout}\n{stderr}\n--- input\n{stamped}");
    // BLOCK ULID, MIN TIME, MAX TIME, DURATION, NUM SAMPLES, NUM CHUNKS, NUM SERIES, SIZE.
    let taken: usize = stdout
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(4)?.parse::<usize>().ok())
        .sum();
    assert_eq!(taken, samples, "{stdout}\n{stderr}");

    // 2. promtool check metrics: parses, and lints clean but for the accepted findings.
    let counters: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let classic: String = text
        .lines()
        .map(|l| {
            for meta in ["# HELP ", "# TYPE ", "# UNIT "] {
                if let Some(rest) = l.strip_prefix(meta) {
                    let name = rest.split(' ').next().unwrap_or_default();
                    if counters.contains(&name) {
                        return format!("{meta}{name}_total{}\n", &rest[name.len()..]);
                    }
                }
            }
            format!("{l}\n")
        })
        .collect();
    let Some((code, stdout, stderr)) = promtool(&["check", "metrics"], &classic) else {
        return;
    };
    let findings: Vec<&str> = stderr
        .lines()
        .chain(stdout.lines())
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let unexpected: Vec<&&str> = findings
        .iter()
        .filter(|f| !ACCEPTED_LINT.contains(f))
        .collect();
    // 0: clean; 3: lint findings only (1 would be a parse failure).
    assert!(
        matches!(code, Some(0 | 3)) && unexpected.is_empty(),
        "promtool check metrics: {code:?}, findings {unexpected:#?}\n--- input\n{classic}"
    );
}

/// `faultline_engine_up` follows the real engine thread: 1 while it runs, 0 once it ended
/// (here because its queue closed; a panic clears the same flag). Without it nothing on
/// `/metrics` shows a dead engine: sources keep counting events as received.
#[test]
fn the_engine_thread_being_up_is_exported() {
    use std::time::Duration;

    use faultline::engine_host::NativeHost;
    use faultline::pipeline::engine_task::EngineTask;
    use faultline::pipeline::queue;
    use faultline::pipeline::router::Router;

    let telemetry = Arc::new(Telemetry::default());
    let (sink, exporter) = prometheus::new(&PrometheusSinkConfig::default(), telemetry.clone());
    let engine = Box::new(NativeHost::new(Params::default(), true).expect("engine"));
    let task = EngineTask::new(
        engine,
        Router::new(&[], 4),
        Vec::new(),
        vec![Box::new(sink)],
        telemetry,
        Duration::from_secs(5),
        Duration::from_secs(1),
    )
    .expect("task");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let (tx, rx) = queue::bounded(4);
    let (cmd_tx, cmd_rx) = tokio::sync::mpsc::channel(1);
    let handle = rt.handle().clone();
    let thread = std::thread::spawn(move || task.run(handle, rx, cmd_rx));

    let text = exporter.encode().unwrap();
    assert!(
        text.contains("# TYPE faultline_engine_up gauge\n")
            && text.contains("# HELP faultline_engine_up 1 while"),
        "{text}"
    );
    assert_eq!(
        sample(&text, "faultline_engine_up"),
        Some(1.0),
        "while the engine thread runs"
    );
    drop(tx);
    drop(cmd_tx);
    thread.join().expect("engine thread");
    assert_eq!(
        sample(&exporter.encode().unwrap(), "faultline_engine_up"),
        Some(0.0),
        "once it ended"
    );
}

/// A WASM engine's guest: its memory next to its limit after it was fed, traps by
/// reason, and `/healthz` down while no guest runs.
#[cfg(feature = "wasm")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wasm_guest_is_exported_and_a_missing_one_fails_healthz() {
    use faultline::engine_host::{EngineHost, HostConfig, WasmHost};
    use faultline::pipeline::latest::LatestReports;
    use faultline::sinks::http::{bind, serve, HttpState};
    use faultline_engine::synth::{generate, StreamSpec};

    let telemetry = Arc::new(Telemetry::default());
    let (_sink, exporter) = prometheus::new(&PrometheusSinkConfig::default(), telemetry.clone());
    let mut host = WasmHost::new(&HostConfig::default(), Params::default(), telemetry.clone())
        .expect("guest starts");
    let events: Vec<_> = generate(&StreamSpec {
        threads: 500,
        seconds: 2.0,
        ..StreamSpec::default()
    })
    .collect();
    for batch in events.chunks(4096) {
        host.ingest("db", batch).unwrap();
    }
    telemetry.add_guest_trap(TrapReason::MemoryLimit);
    let text = exporter.encode().unwrap();
    let memory = sample(&text, "faultline_guest_memory_bytes").expect("memory gauge");
    assert_eq!(memory, host.guest_memory_bytes() as f64);
    assert!(memory > f64::from(1u32 << 20), "{memory}");
    assert_eq!(
        sample(&text, "faultline_guest_memory_limit_bytes"),
        Some(f64::from(512u32 << 20))
    );
    assert_eq!(sample(&text, "faultline_guest_up"), Some(1.0));
    assert_eq!(
        sample(
            &text,
            r#"faultline_guest_traps_total{reason="memory_limit"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, r#"faultline_guest_traps_total{reason="other"}"#),
        Some(0.0)
    );

    let (listener, addr) = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let (commands, _rx) = tokio::sync::mpsc::channel(1);
    let state = HttpState {
        exporter: exporter.clone(),
        latest: Arc::new(LatestReports::new(1)),
        commands,
        engine_alive: Arc::new(std::sync::atomic::AtomicBool::new(true)),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, state, async {
        let _ = stopped.await;
    }));
    assert_eq!(healthz(addr).await, "HTTP/1.1 200 OK ok");
    // As after a trap whose restart failed: the engine thread lives, its guest does not.
    telemetry.set_guest_state(false, 0);
    assert_eq!(
        healthz(addr).await,
        "HTTP/1.1 503 Service Unavailable engine guest unavailable"
    );
    let text = exporter.encode().unwrap();
    assert_eq!(sample(&text, "faultline_guest_up"), Some(0.0));
    telemetry.set_guest_state(true, 1 << 20);
    assert_eq!(healthz(addr).await, "HTTP/1.1 200 OK ok");

    // Gone with its host: no gauges left behind.
    drop(host);
    let text = exporter.encode().unwrap();
    assert_eq!(sample(&text, "faultline_guest_memory_bytes"), None);
    let _ = stop.send(());
    server.await.unwrap().unwrap();
}

/// `GET /healthz` on `addr`: the status line and the body, joined by a space.
#[cfg(feature = "wasm")]
async fn healthz(addr: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut raw = String::new();
    c.read_to_string(&mut raw).await.unwrap();
    let status = raw.lines().next().unwrap_or_default().to_owned();
    let body = raw.split("\r\n\r\n").nth(1).unwrap_or_default().trim_end();
    format!("{status} {body}")
}
