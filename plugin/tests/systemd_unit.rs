//! The shipped systemd unit (`config/systemd/faultline.service`) against the real
//! `systemd-analyze` and the real binary: an operator's first `systemctl start` must not
//! fail on a misspelt directive, an argument the CLI does not take, or a stop that systemd
//! would read as a failure (and restart).

mod run_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use run_support::{http, signal, start, wait_exit};

const INSTALLED_BINARY: &str = "/usr/local/bin/faultline";
const INSTALLED_CONFIG: &str = "/etc/faultline/faultline.toml";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The unit with its install paths replaced by this build's binary and the repo's config.
fn localized_unit() -> String {
    let text = std::fs::read_to_string(repo().join("config/systemd/faultline.service"))
        .expect("config/systemd/faultline.service");
    let config = repo().join("config/faultline.toml");
    text.replace(INSTALLED_BINARY, env!("CARGO_BIN_EXE_faultline"))
        .replace(INSTALLED_CONFIG, config.to_str().expect("utf-8 path"))
}

/// The values of `key=` in the unit's [Service] section, in order.
fn directive(unit: &str, key: &str) -> Vec<String> {
    let prefix = format!("{key}=");
    unit.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(str::to_string)
        .collect()
}

#[test]
fn systemd_accepts_the_unit_without_a_warning() {
    let Some(analyze) = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
    else {
        eprintln!("\n!!! SKIPPED systemd unit check: systemd-analyze is not installed (scripts/setup.sh installs it)\n");
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("faultline.service");
    std::fs::write(&path, localized_unit()).expect("write unit");
    let out = Command::new(analyze)
        .arg("verify")
        .arg(&path)
        .output()
        .expect("run systemd-analyze");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "systemd-analyze verify: {stderr}");
    // An unknown or misspelt directive is only a warning, which systemd then ignores.
    assert!(
        stderr.trim().is_empty(),
        "systemd-analyze verify warned: {stderr}"
    );
}

#[test]
fn the_units_commands_start_faultline_and_its_stop_signal_ends_it_cleanly() {
    let unit = localized_unit();
    let pre = directive(&unit, "ExecStartPre");
    let [pre] = pre.as_slice() else {
        panic!("one ExecStartPre: {pre:?}")
    };
    let pre: Vec<&str> = pre.split_whitespace().collect();
    let out = Command::new(pre[0])
        .args(&pre[1..])
        .output()
        .expect("run ExecStartPre");
    assert!(
        out.status.success(),
        "ExecStartPre failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let exec = directive(&unit, "ExecStart");
    let [exec] = exec.as_slice() else {
        panic!("one ExecStart: {exec:?}")
    };
    let args: Vec<&str> = exec.split_whitespace().skip(1).collect();
    // The shipped config listens on the standard ports; a test must not take them.
    let mut run = start(
        &args,
        &[
            ("FAULTLINE_SINKS__PROMETHEUS__LISTEN", "127.0.0.1:0"),
            ("FAULTLINE_SOURCES__OTLP__GRPC", "127.0.0.1:0"),
            ("FAULTLINE_SOURCES__OTLP__HTTP", "127.0.0.1:0"),
        ],
    );
    let (status, _) = http(run.addr, "GET", "/healthz");
    assert_eq!(status, 200, "/healthz of the unit's command");

    // KillMode=mixed: SIGTERM to faultline alone, then whatever is left is killed after
    // TimeoutStopSec. A clean stop must exit 0 within it: a non-zero exit or the kill
    // leaves the unit `failed` after every `systemctl stop`.
    assert_eq!(directive(&unit, "KillMode"), ["mixed"]);
    let stop = directive(&unit, "TimeoutStopSec");
    let stop: u64 = stop
        .first()
        .and_then(|s| s.trim_end_matches('s').parse().ok())
        .expect("TimeoutStopSec in seconds");
    signal(&run.child, "-TERM");
    let status = wait_exit(&mut run.child, Duration::from_secs(stop));
    assert!(status.success(), "exit status after SIGTERM: {status}");
}
