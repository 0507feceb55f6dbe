//! `faultline analyze` and `faultline calibrate` on the real recorded traces: the JSON
//! schema operators script against, on-demand triggering, and clear failures on bad input.

#[path = "../../wasm-guest/tests/common/traces.rs"]
mod traces;

use std::path::Path;
use std::process::{Command, Output};

fn faultline(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_faultline"))
        .args(args)
        .output()
        .expect("run faultline")
}

fn truth(case: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(case.join("truth.json")).expect("truth.json");
    serde_json::from_str(&text).expect("truth.json parses")
}

#[test]
fn json_output_has_the_documented_schema_in_the_trace_clock() {
    let Some(case) = traces::get("perf-faults/mariadb_cpu_cap") else {
        return;
    };
    let input = format!("perf:{}", case.join("trace.txt.zst").display());
    let out = faultline(&[
        "analyze", "--input", &input, "--target", "mariadbd", "--format", "json",
    ]);
    assert!(
        out.status.success(),
        "analyze failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one object per target, one target selected");
    let v: serde_json::Value = serde_json::from_str(lines[0]).expect("valid JSON");
    for key in [
        "verdict",
        "impact_factor",
        "onset_dispersion_seconds",
        "window_start_ns",
        "window_end_ns",
        "anomaly_onset_ns",
        "threads",
        "top_syscalls_by_time",
        "top_syscalls_by_frequency",
        "subsystem",
        "hint",
        "parameters",
        "timeline",
        "anomalies",
    ] {
        assert!(v.get(key).is_some(), "missing key `{key}` in {v}");
    }
    assert!(["external", "internal", "none"].contains(&v["verdict"].as_str().unwrap_or("?")));
    assert_eq!(v["target"], "mariadbd");
    // Windows are in the trace's own clock: inside the recorded span.
    let t = truth(&case);
    let (start, end) = (
        t["trace_start_ns"].as_u64().unwrap(),
        t["trace_end_ns"].as_u64().unwrap(),
    );
    let timeline = v["timeline"].as_array().expect("timeline array");
    assert!(!timeline.is_empty());
    for e in timeline {
        let w = e["window_end_ns"].as_u64().expect("window_end_ns");
        assert!(
            w >= start && w <= end + 1_000_000_000,
            "window end {w} outside trace [{start}, {end}]"
        );
    }
    // Every event of the trace was read and routed: one per line, no decode errors.
    let lines = event_lines(&case.join("trace.txt.zst"));
    assert!(lines > 0);
    assert_eq!(v["input"]["decode_errors"], 0);
    assert_eq!(
        v["input"]["events_received"].as_u64(),
        Some(lines),
        "{}",
        v["input"]
    );
    assert_eq!(
        v["input"]["events_routed"].as_u64(),
        Some(lines),
        "{}",
        v["input"]
    );
}

/// Lines of a zstd-compressed `perf script` trace that are not blank: one event each.
fn event_lines(path: &Path) -> u64 {
    use std::io::BufRead;
    let file = std::fs::File::open(path).expect("trace");
    let mut text = std::io::BufReader::new(zstd::Decoder::new(file).expect("zstd"));
    let (mut lines, mut line) = (0, Vec::new());
    while text.read_until(b'\n', &mut line).expect("read trace") > 0 {
        if line.iter().any(|b| !b.is_ascii_whitespace()) {
            lines += 1;
        }
        line.clear();
    }
    lines
}

#[test]
fn trigger_diagnoses_around_the_alarm_time() {
    let Some(case) = traces::get("perf-faults/mariadb_row_lock") else {
        return;
    };
    let t = truth(&case);
    let alarm = t["fault_start_ns"].as_u64().unwrap() + 10_000_000_000;
    let input = format!("perf:{}", case.join("trace.txt.zst").display());
    let out = faultline(&[
        "analyze",
        "--input",
        &input,
        "--trigger-at",
        &alarm.to_string(),
        "--format",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["trigger"], "on_demand");
    // The alarm says the target became slow at `alarm`: the window reaches W back from it
    // (the baseline side) and onsets are measured from it.
    let w = (v["parameters"]["window_seconds"].as_f64().unwrap() * 1e9) as u64;
    assert_eq!(v["window_start_ns"].as_u64(), Some(alarm - w));
    assert!(v["window_end_ns"].as_u64().unwrap() >= alarm);
    // The onset is the alarm, or an earlier corroborated onset inside the window.
    let onset = v["anomaly_onset_ns"].as_u64().expect("an onset");
    assert!(
        onset <= alarm && onset >= alarm - w,
        "onset {onset} vs alarm {alarm}"
    );
}

#[test]
fn calibrate_prints_config_that_check_config_accepts() {
    let Some(case) = traces::get("perf-faults/mariadb_cpu_cap") else {
        return;
    };
    let t = truth(&case);
    let input = format!("perf:{}", case.join("trace.txt.zst").display());
    let start = t["fault_start_ns"].as_u64().unwrap().to_string();
    let args = [
        "calibrate",
        "--input",
        &input,
        "--target",
        "mariadbd",
        "--fault-start-ns",
        &start,
        // Recorded on another host: the block is that host's target.
        "--host",
        "db-2",
    ];
    let out = faultline(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let toml = String::from_utf8(out.stdout).expect("utf-8");
    assert!(
        toml.contains("alpha_seconds = ") && toml.contains("beta_seconds = "),
        "{toml}"
    );
    assert!(
        toml.contains(
            "name = \"mariadbd@db-2\"\nprocess_names = [\"mariadbd\"]\nhosts = [\"db-2\"]\n"
        ),
        "{toml}"
    );
    // `calibrate … | head -1`: the reader went away, which is no failure.
    let closed = faultline_into_closed_pipe(&args);
    assert!(
        closed.status.success(),
        "{:?}: {}",
        closed.status,
        String::from_utf8_lossy(&closed.stderr)
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("calibrated.toml");
    std::fs::write(&file, &toml).expect("write");
    let check = faultline(&["check-config", file.to_str().expect("utf-8 path")]);
    assert!(
        check.status.success(),
        "check-config rejected calibrate's output:\n{toml}\n{}",
        String::from_utf8_lossy(&check.stderr)
    );
}

#[test]
fn bad_inputs_fail_with_a_clear_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let garbage = dir.path().join("garbage.txt");
    std::fs::write(&garbage, "this is not a trace\n\u{0}\u{1}binary junk\n").expect("write");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["analyze".into(), "--input".into(), "nosuch:/x".into()],
            "unknown source",
        ),
        (
            vec![
                "analyze".into(),
                "--input".into(),
                "perf:/nonexistent/trace.txt".into(),
            ],
            "nonexistent",
        ),
        (
            vec![
                "analyze".into(),
                "--input".into(),
                format!("perf:{}", garbage.display()),
            ],
            "no report",
        ),
        (
            vec![
                "analyze".into(),
                "--input".into(),
                format!("auto:{}", garbage.display()),
            ],
            "not a recognised trace",
        ),
        (
            vec![
                "analyze".into(),
                "--input".into(),
                format!("perf:{}", garbage.display()),
                "--set".into(),
                "alpha_seconds=-1".into(),
            ],
            "alpha_seconds",
        ),
        (
            vec![
                "analyze".into(),
                "--input".into(),
                format!("perf:{}", garbage.display()),
                "--recorded-asleep".into(),
            ],
            "--recorded-until",
        ),
    ];
    for (args, expected) in cases {
        let out = faultline(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(
            stderr.contains(expected),
            "{args:?}: expected `{expected}` in: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    }
}

/// Runs faultline with a stdout pipe whose reading end is already closed, as under
/// `faultline … | head -1` once head has exited.
fn faultline_into_closed_pipe(args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    Command::new(env!("CARGO_BIN_EXE_faultline"))
        .args(args)
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("run faultline")
}

#[test]
fn a_closed_stdout_is_not_a_crash() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let input = format!("perf:{}", data.join("perf_script_mariadb.txt").display());
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("faultline.toml");
    std::fs::write(&cfg, "[pipeline]\nqueue_capacity = 8\n").expect("write");
    for args in [
        vec!["analyze", "--input", &input, "--no-progress"],
        vec![
            "analyze",
            "--input",
            &input,
            "--no-progress",
            "--format",
            "json",
        ],
        vec!["check-config", cfg.to_str().expect("utf-8 path")],
    ] {
        let out = faultline_into_closed_pipe(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {:?}\n{stderr}", out.status);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}
