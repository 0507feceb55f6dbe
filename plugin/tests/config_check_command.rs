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
