//! `faultline check-config` as operators run it: exit status and messages.

use std::process::Command;

fn check(text: &str, ext: &str) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("faultline.{ext}"));
    std::fs::write(&path, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
        .args(["check-config", path.to_str().unwrap()])
        .env_remove("FAULTLINE_SINKS__PROMETHEUS__LISTEN")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_good_config_prints_a_summary() {
    let (ok, out, err) = check(
        "[[targets]]\nname = \"db\"\nprocess_names = [\"mariadbd\"]\n[sinks.json]\nenabled = true\n",
        "toml",
    );
    assert!(ok, "{err}");
    assert!(out.contains(": OK"), "{out}");
    assert!(out.contains("targets: db"), "{out}");
    assert!(
        out.contains("prometheus (127.0.0.1:9464)") && out.contains("json"),
        "{out}"
    );
    let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert!(
        out.contains(&format!("this host: {} (hostname)", kernel.trim())),
        "{out}"
    );
    let (ok, out, err) = check("[pipeline]\nhost_name = \"node-7\"\n", "toml");
    assert!(ok, "{err}");
    assert!(
        out.contains("this host: node-7 (pipeline.host_name)"),
        "{out}"
    );
}

#[test]
fn a_bad_config_fails_naming_the_key() {
    let (ok, _, err) = check(
        "targets:\n  - name: a\n    pids: [1]\n  - name: b\n    pids: [2]\n    alpha_seconds: -1\n",
        "yaml",
    );
    assert!(!ok);
    assert!(
        err.contains("targets[1].alpha_seconds: must be a positive number of seconds, got -1"),
        "{err}"
    );
}

/// What systemd's `ExecStartPre=faultline check-config` must stop: configs `run` would
/// fail to start with, or start with and never deliver from.
#[test]
fn configs_run_cannot_start_fail_the_check() {
    for (text, key) in [
        (
            "[sinks.prometheus]\nlisten = \"0.0.0.0:4318\"\n",
            "sinks.prometheus.listen: `0.0.0.0:4318` and sources.otlp.http (`127.0.0.1:4318`) cannot both listen on port 4318",
        ),
        (
            "[sinks.otlp]\nenabled = true\nendpoint = \"https://collector:4317\"\n",
            "sinks.otlp.endpoint: `https://collector:4317`: this build of faultline has no TLS support",
        ),
        (
            "[sinks.otlp]\nenabled = true\nendpoint = \"collector:4317\"\n",
            "sinks.otlp.endpoint: must be a URL with its scheme, like `http://collector:4317`",
        ),
        (
            "[sources.perf]\nenabled = true\ncgroup = \"\"\n",
            "sources.perf.cgroup: must name a cgroup",
        ),
    ] {
        let (ok, out, err) = check(text, "toml");
        assert!(!ok, "{text}: {out}");
        assert!(err.contains(key), "{text}: {err}");
    }
    let (ok, _, err) = check(
        "[sinks.otlp]\nenabled = true\nendpoint = \"http://collector:4317\"\n",
        "toml",
    );
    assert!(ok, "{err}");
}

/// Limits whose worst case outgrows the WASM guest's memory pass the check with a warning
/// on stderr that says how to make them fit; one target with the defaults has none.
#[test]
fn limits_that_may_not_fit_the_guest_memory_are_warned_about() {
    let targets = (0..4)
        .map(|i| format!("[[targets]]\nname = \"t{i}\"\nprocess_names = [\"p{i}\"]\n"))
        .collect::<String>();
    let (ok, out, err) = check(&targets, "toml");
    assert!(ok, "a warning, not an error: {err}");
    assert!(out.contains(": OK"), "{out}");
    assert!(
        err.contains("WARN")
            && err.contains("4 configured target(s)")
            && err.contains("Raise [engine] memory_limit_bytes to at least"),
        "{err}"
    );

    let (ok, _, err) = check(
        "[[targets]]\nname = \"db\"\nprocess_names = [\"mariadbd\"]\n",
        "toml",
    );
    assert!(ok, "{err}");
    assert!(!err.contains("memory_limit_bytes"), "{err}");
}
