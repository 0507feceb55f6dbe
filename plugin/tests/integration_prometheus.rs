//! The drop-in integration files (Prometheus rules, Grafana dashboard, example configs,
//! agent configs) checked against the real tools: promtool, the Prometheus server, the
//! faultline binary itself.
//!
//! Tools that are not installed make a test skip (recorded, see `prereq`) instead of
//! failing, so a developer machine without Prometheus still runs the rest; under
//! `FAULTLINE_REQUIRE_TOOLS=1` (scripts/test.sh, after scripts/setup.sh installed them:
//! `apt-get install prometheus`, `pip install pyyaml`) a missing one fails its test.

mod prereq;
#[path = "../../wasm-guest/tests/common/traces.rs"]
mod traces;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// Exit status the helper scripts use for "skipped: a required program is missing".
const SKIP: i32 = 77;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

/// The program's path when it is installed (found on PATH or at `fallback`).
fn installed(name: &str, fallback: &str) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| Some(PathBuf::from(fallback)).filter(|p| p.is_file()))
}

/// An installable program the test `test` needs is missing (see `prereq::missing_tool`).
fn skip(test: &str, why: &str) {
    prereq::missing_tool(&format!("{test}: {why}"), "scripts/setup.sh installs it");
}

fn show(out: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn run(cmd: &mut Command) -> Output {
    match cmd.output() {
        Ok(o) => o,
        Err(e) => panic!("cannot run {cmd:?}: {e}"),
    }
}

#[test]
fn promtool_accepts_config_and_rules_and_rule_unit_tests_pass() {
    let Some(promtool) = installed("promtool", "/usr/bin/promtool") else {
        return skip(
            "promtool test",
            "promtool not installed (apt-get install prometheus)",
        );
    };
    let dir = repo().join("config/prometheus");
    // `check config` also checks every rule file the config lists.
    let out =
        run(Command::new(&promtool)
            .current_dir(&dir)
            .args(["check", "config", "prometheus.yml"]));
    assert!(
        out.status.success(),
        "promtool check config:\n{}",
        show(&out)
    );

    let mut tests: Vec<PathBuf> = std::fs::read_dir(dir.join("tests"))
        .map(|rd| rd.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    tests.retain(|p| p.extension().is_some_and(|e| e == "yml"));
    tests.sort();
    assert!(
        tests.len() >= 2,
        "expected alert and recording rule tests, found {tests:?}"
    );
    let out = run(Command::new(&promtool)
        .current_dir(&dir)
        .arg("test")
        .arg("rules")
        .args(&tests));
    assert!(out.status.success(), "promtool test rules:\n{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.matches("SUCCESS").count(),
        tests.len(),
        "every test file must pass:\n{text}"
    );
}

#[test]
fn example_configs_pass_check_config() {
    let dir = repo().join("config/examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| rd.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "toml"));
    files.sort();
    let names: Vec<String> = files
        .iter()
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    assert_eq!(
        names,
        ["jvm-service", "mariadb", "nginx"],
        "examples in {dir:?}"
    );
    for f in &files {
        let out = run(Command::new(env!("CARGO_BIN_EXE_faultline"))
            .arg("check-config")
            .arg(f)
            // Overrides from the developer's environment must not mask a broken example.
            .env_clear());
        assert!(out.status.success(), "{}:\n{}", f.display(), show(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("OK"), "{}: {stdout}", f.display());
        assert!(
            stdout.contains("sinks: prometheus (127.0.0.1:9464)"),
            "{}: the examples are scraped at the default address: {stdout}",
            f.display()
        );
    }
}

/// Every panel (rows' nested panels included).
fn panels(dash: &Value) -> Vec<&Value> {
    fn walk<'a>(list: &'a Value, out: &mut Vec<&'a Value>) {
        for p in list.as_array().into_iter().flatten() {
            out.push(p);
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dash["panels"], &mut out);
    out
}

#[test]
fn dashboard_is_well_formed() {
    let path = repo().join("dashboards/faultline.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let dash: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"));

    assert!(dash["schemaVersion"].as_u64().unwrap_or(0) >= 39);
    assert_eq!(dash["uid"], "faultline");
    let vars = dash["templating"]["list"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let var = |name: &str| vars.iter().find(|v| v["name"] == name).cloned();
    let ds = var("datasource").unwrap_or_else(|| panic!("no datasource variable"));
    assert_eq!(
        (ds["type"].as_str(), ds["query"].as_str()),
        (Some("datasource"), Some("prometheus"))
    );
    let target = var("target").unwrap_or_else(|| panic!("no target variable"));
    assert_eq!(
        target["definition"],
        "label_values(faultline_impact_factor_ratio, target)"
    );

    let mut ids = HashSet::new();
    let mut exprs = 0;
    let mut cells: Vec<(String, [u64; 4])> = Vec::new();
    for p in panels(&dash) {
        let title = p["title"].as_str().unwrap_or("?").to_owned();
        assert!(
            ids.insert(p["id"].as_u64()),
            "duplicate panel id in {title}"
        );
        let g = &p["gridPos"];
        let rect = ["x", "y", "w", "h"].map(|k| g[k].as_u64().unwrap_or(u64::MAX));
        assert!(rect[0] + rect[2] <= 24, "{title}: wider than the grid");
        for (other, r) in &cells {
            let overlap = rect[0] < r[0] + r[2]
                && r[0] < rect[0] + rect[2]
                && rect[1] < r[1] + r[3]
                && r[1] < rect[1] + rect[3];
            assert!(!overlap, "{title} overlaps {other}");
        }
        cells.push((title.clone(), rect));
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        let targets = p["targets"].as_array().cloned().unwrap_or_default();
        assert!(!targets.is_empty(), "{title}: no query");
        for t in &targets {
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{title}");
            let expr = t["expr"].as_str().unwrap_or_default();
            assert!(expr.contains("faultline"), "{title}: {t}");
            // The `$instance` picker applies to every panel, and sums never merge the
            // same target of different faultline instances.
            assert!(
                expr.contains(r#"instance=~"$instance""#),
                "{title}: ignores $instance: {expr}"
            );
            // Except the fleet panel, which counts a service's hosts over the instances.
            let fleet = title.starts_with("Hosts of the service");
            for (i, _) in expr.match_indices(" by (") {
                let grouping = &expr[i..expr[i..].find(')').map_or(expr.len(), |j| i + j)];
                assert!(
                    grouping.contains("instance") || fleet && grouping.contains("service"),
                    "{title}: groups without instance: {expr}"
                );
            }
            exprs += 1;
        }
    }
    assert!(exprs >= 15, "only {exprs} queries");
    for a in dash["annotations"]["list"].as_array().into_iter().flatten() {
        if let Some(expr) = a["expr"].as_str() {
            assert!(
                expr.contains(r#"instance=~"$instance""#),
                "annotation ignores $instance: {expr}"
            );
        }
    }

    // The paper's thresholds are drawn on the impact factor panel: Δ = 0.8, δ = 0.9.
    let tau = panels(&dash)
        .into_iter()
        .find(|p| {
            p["title"]
                .as_str()
                .is_some_and(|t| t.starts_with("Impact factor"))
        })
        .unwrap_or_else(|| panic!("no impact factor panel"));
    let steps: Vec<f64> = tau["fieldConfig"]["defaults"]["thresholds"]["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["value"].as_f64())
        .collect();
    assert_eq!(steps, [0.8, 0.9]);
    assert_ne!(
        tau["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"],
        "off"
    );
}

/// Runs a helper script; `None` when it skipped (status 77).
fn python(test: &str, args: &[&str]) -> Option<Output> {
    let Some(py) = installed("python3", "/usr/bin/python3") else {
        skip(test, "python3 not installed");
        return None;
    };
    let out = run(Command::new(py).args(args).current_dir(repo()));
    // The scripts skip (77) only for a missing program or library, or a missing trace
    // that the caller already looked for (`traces::get`).
    if out.status.code() == Some(SKIP) {
        skip(test, &String::from_utf8_lossy(&out.stderr));
        return None;
    }
    Some(out)
}

#[test]
fn agent_configs_reference_defined_components_and_parse_real_perf_lines() {
    let script = repo().join("integration-tests/prometheus/check_agent_configs.py");
    // The script finds the trace the same way (FAULTLINE_TRACES, then beside the repo).
    let trace = traces::get("perf-faults/mariadb_cpu_cap/trace.txt.zst");
    let Some(out) = python("agent configs", &[&script.to_string_lossy()]) else {
        return;
    };
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let zstd = installed("zstd", "/usr/bin/zstd").is_some();
    if trace.is_some() && zstd {
        // "vector remap regex parses N real perf-script lines", N > 0.
        let parsed = stdout
            .lines()
            .find_map(|l| {
                l.strip_prefix("vector remap regex parses ")?
                    .strip_suffix(" real perf-script lines")?
                    .parse::<u64>()
                    .ok()
            })
            .unwrap_or(0);
        assert!(
            parsed > 0,
            "no real perf-script lines parsed:\n{}",
            show(&out)
        );
    } else {
        assert!(stdout.contains("regex NOT tried"), "{}", show(&out));
        // A missing trace was already reported (skipped, or failed under
        // FAULTLINE_REQUIRE_TRACES) by `traces::get`.
        if trace.is_some() {
            skip(
                "agent configs: the remap regex on real perf-script lines",
                "zstd not installed (apt-get install zstd)",
            );
        }
    }
}

/// The live test: two real `faultline run`s, each replaying a real fault trace (a CPU cap and
/// a table lock), scraped by the real Prometheus server with the shipped rules; the alert of
/// each faultline's verdict must fire with its report's hint and top syscall, every
/// dashboard query must return data, and FaultlineDown must fire once they stop (~35 s).
/// With `--require-truth` each verdict must also be its case's truth (external for the CPU
/// cap, internal for the table lock), so both diagnosis alerts are seen firing.
#[test]
fn live_prometheus_alerts_and_dashboard_follow_faultline() {
    let script = repo().join("integration-tests/prometheus/live_test.py");
    // The script's default cases; it finds them the same way.
    for case in ["mariadb_cpu_cap", "mariadb_lock_tables"] {
        if traces::get(&format!("perf-faults/{case}/truth.json")).is_none() {
            return;
        }
    }
    let Some(out) = python(
        "live Prometheus test",
        &[
            &script.to_string_lossy(),
            "--faultline",
            env!("CARGO_BIN_EXE_faultline"),
            "--require-truth",
        ],
    ) else {
        return;
    };
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for alert in ["FaultlineExternalFault", "FaultlineInternalFault"] {
        assert!(
            stdout.contains(&format!("{alert} firing:")),
            "{alert} never fired: {stdout}"
        );
    }
    for case in ["mariadb_cpu_cap", "mariadb_lock_tables"] {
        let said = format!("{case}: faultline's verdict");
        assert!(
            stdout
                .lines()
                .any(|l| l.contains(&said) && l.contains("agrees with truth.json")),
            "{case}: verdict not checked against its truth: {stdout}"
        );
    }
    // Both pages count the service's hosts: one external and one internal of two.
    let counted = "the page says 'Hosts of mariadb with this verdict: 1 of 2 reporting'";
    assert_eq!(stdout.matches(counted).count(), 2, "{stdout}");
    assert!(stdout.contains("0 failed"), "dashboard queries: {stdout}");
    assert!(stdout.contains("FaultlineDown firing"), "{stdout}");
}
