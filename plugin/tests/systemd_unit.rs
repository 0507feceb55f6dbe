//! The shipped systemd unit (`config/systemd/faultline.service`) against the real
//! `systemd-analyze` and the real binary: an operator's first `systemctl start` must not
//! fail on a misspelt directive, an argument the CLI does not take, or a stop that systemd
//! would read as a failure (and restart).

mod prereq;
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
        prereq::missing_tool("systemd-analyze", "apt-get install systemd");
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

/// `Restart=on-failure` restarts a failing `ExecStartPre` (a bad config) too: the start
/// limit must be able to trip, or the unit restarts forever.
#[test]
fn a_unit_that_keeps_failing_to_start_stops_restarting() {
    let unit = localized_unit();
    let seconds = |key: &str| -> f64 {
        let v = directive(&unit, key);
        v.first()
            .and_then(|s| s.trim_end_matches('s').parse().ok())
            .unwrap_or_else(|| panic!("{key} in seconds: {v:?}"))
    };
    let burst = seconds("StartLimitBurst");
    let (interval, restart) = (seconds("StartLimitIntervalSec"), seconds("RestartSec"));
    assert_eq!(directive(&unit, "Restart"), ["on-failure"]);
    assert!(
        (burst - 1.0) * restart < interval,
        "{burst} starts {restart} s apart must fit in the {interval} s start-limit interval"
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

/// Shutdown steps of `faultline run` that may each take `shutdown_timeout_seconds`, one
/// after the other, with everything enabled: the OTLP receiver, four pull sources (perf,
/// its TCP sampler, LTTng, replay), the engine's drain and the sinks' final writes
/// (`pipeline::runner::run`).
const MAX_SHUTDOWN_STEPS: f64 = 7.0;
/// What the shutdown takes beyond its steps: the HTTP endpoint (2 s) and the runtime (1 s).
const SHUTDOWN_EXTRA_SECONDS: f64 = 3.0;

/// systemd kills faultline after TimeoutStopSec, losing the final reports and failing the
/// unit: it must outlast the longest shutdown of the shipped config's per-step limit.
#[test]
fn the_stop_timeout_outlasts_the_longest_shutdown_of_the_shipped_config() {
    let unit = localized_unit();
    let stop: f64 = directive(&unit, "TimeoutStopSec")
        .first()
        .and_then(|s| s.trim_end_matches('s').parse().ok())
        .expect("TimeoutStopSec in seconds");
    let cfg = faultline::config::load(Some(&repo().join("config/faultline.toml")))
        .expect("config/faultline.toml loads");
    let step = cfg.pipeline.shutdown_timeout_seconds;
    let longest = MAX_SHUTDOWN_STEPS * step + SHUTDOWN_EXTRA_SECONDS;
    assert!(
        stop > longest,
        "TimeoutStopSec={stop} must exceed {MAX_SHUTDOWN_STEPS} steps x {step} s + {SHUTDOWN_EXTRA_SECONDS} s = {longest} s"
    );
}

/// The unit's file-system hardening, emulated without systemd (CI has no systemd init):
/// in a private mount namespace every mount but the API file systems read-only
/// (`ProtectSystem=strict`), all of `/sys` (tracefs and the cgroup trees included) and
/// `/proc/sys` read-only and `/proc/kallsyms` and `/proc/kcore` empty
/// (`ProtectKernelTunables`, `ProtectControlGroups`), a private `/tmp`, one writable state
/// directory (`StateDirectory`), and `no_new_privs` (`NoNewPrivileges`). Under it the live
/// perf source, its TCP sampler and the WASM engine must all work and the JSON sink must
/// write the final reports. (The unit's seccomp-based directives are not emulated.)
#[test]
fn the_units_file_system_hardening_leaves_the_live_sources_working() {
    let tools = ["perf", "unshare", "setpriv", "python3"];
    if let Some(t) = tools
        .iter()
        .find(|t| Command::new(t).arg("--version").output().is_err())
    {
        let package = match *t {
            "perf" => "linux-perf",
            "python3" => "python3",
            _ => "util-linux",
        };
        prereq::missing_tool(t, &format!("apt-get install {package}"));
        return;
    }
    let probe = Command::new("unshare").args(["-m", "true"]).status();
    if !probe.is_ok_and(|s| s.success()) {
        prereq::skip("hardening check: cannot make a mount namespace (needs root)");
        return;
    }
    // Outside /tmp, which the namespace replaces.
    let state = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("state dir");
    let state_dir = state.path().to_str().expect("utf-8 path").to_string();
    // A process making calls all the time, for the perf source to watch.
    let busy = Command::new("python3")
        .args([
            "-c",
            "import os, time\nwhile True:\n    [os.stat('/') for _ in range(100)]\n    time.sleep(0.002)",
        ])
        .spawn()
        .expect("spawn the busy process");
    // Killed however the test ends: a leaked child would hold the test's output open.
    let busy = KillOnDrop(busy);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let config = format!(
        "[engine]\nkind = \"wasm\"\n[sources.otlp]\nenabled = false\n\
         [sources.perf]\nenabled = true\npids = [{}]\n\
         [sinks.prometheus]\nlisten = \"127.0.0.1:{port}\"\n\
         [sinks.json]\nenabled = true\npath = \"{state_dir}/reports.jsonl\"\n",
        busy.0.id()
    );
    std::fs::write(state.path().join("faultline.toml"), config).expect("write config");
    let script = format!(
        r#"set -e
mount --make-rprivate /
mount --bind "{state_dir}" "{state_dir}"
for m in $(awk '{{print $2}}' /proc/self/mounts | grep -vE '^/(proc|sys|dev)(/|$)' | sort -u); do
  [ "$m" = "{state_dir}" ] || mount -o bind,remount,ro "$m" 2>/dev/null || true
done
for m in $(awk '{{print $2}}' /proc/self/mounts | grep -E '^/sys(/|$)' | sort -u); do
  mount -o bind,remount,ro "$m"
done
mount --bind /proc/sys /proc/sys && mount -o bind,remount,ro /proc/sys
for f in /proc/kallsyms /proc/kcore; do [ ! -e "$f" ] || mount --bind /dev/null "$f"; done
mount -t tmpfs tmpfs /tmp
if touch /etc/.faultline-probe 2>/dev/null; then echo "/etc is writable" >&2; exit 97; fi
if awk '$2 ~ /^\/sys/ && $4 !~ /^ro/ {{found=1}} END {{exit !found}}' /proc/self/mounts; then
  echo "a /sys mount is writable" >&2; exit 98
fi
exec setpriv --no-new-privs "{bin}" run --config "{state_dir}/faultline.toml""#,
        bin = env!("CARGO_BIN_EXE_faultline"),
    );
    let run = Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn faultline in a namespace");
    let mut run = KillOnDrop(run);
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let metrics_of = |name: &str, text: &str| run_support::sample(text, name).unwrap_or(0.0);
    // Until the perf source, its TCP sampler and the engine have all delivered (perf needs
    // a few seconds to attach; a busy machine may need more).
    let mut text = String::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if let Some(status) = run.0.try_wait().expect("wait") {
            panic!("faultline ended under the hardening: {status}");
        }
        if let Ok(mut s) = std::net::TcpStream::connect(addr) {
            use std::io::{Read, Write};
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n");
            text.clear();
            let _ = s.read_to_string(&mut text);
            let perf = metrics_of(r#"faultline_events_received_total{source="perf"}"#, &text);
            let tcp = metrics_of(
                r#"faultline_events_received_total{source="tcp_segments"}"#,
                &text,
            );
            if perf > 0.0 && tcp > 0.0 && metrics_of("faultline_engine_events_total", &text) > 0.0 {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    signal(&run.0, "-TERM");
    let status = wait_exit(&mut run.0, Duration::from_secs(45));
    drop(busy);
    assert!(
        metrics_of(r#"faultline_events_received_total{source="perf"}"#, &text) > 0.0,
        "the perf source delivered: {text}"
    );
    assert!(
        metrics_of(
            r#"faultline_events_received_total{source="tcp_segments"}"#,
            &text
        ) > 0.0,
        "the TCP sampler delivered: {text}"
    );
    // Every reason's series is exported from 0: a trap of any kind shows.
    let traps: Vec<f64> = ["memory_limit", "timeout", "fuel", "other"]
        .iter()
        .map(|r| {
            run_support::sample(
                &text,
                &format!(r#"faultline_guest_traps_total{{reason="{r}"}}"#),
            )
            .expect("a trap series per reason")
        })
        .collect();
    assert_eq!(traps, [0.0; 4], "{text}");
    assert!(status.success(), "exit status after SIGTERM: {status}");
    let reports = std::fs::read_to_string(state.path().join("reports.jsonl")).expect("reports");
    assert!(
        reports.lines().any(|l| l.contains("end_of_stream")),
        "final reports written to the state directory: {reports}"
    );
}

/// A child process killed when the test lets go of it, passing or failing.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
