//! Where the real shared traces are, the same for every test, bench and script:
//! `$FAULTLINE_TRACES` if set, else `<repo root>/../shared/traces` if it exists, else
//! `/work/shared/traces`. A missing trace skips its test loudly (and appends a line to
//! `$FAULTLINE_SKIP_LOG` when set, which `scripts/test.sh` lists at the end), unless
//! `FAULTLINE_REQUIRE_TRACES=1` (set by `scripts/test.sh` when it found the traces): then it
//! fails, so CI cannot go green having run nothing real.
//!
//! Include with `#[path = "common/traces.rs"] mod traces;` here, and from the plugin's
//! tests and benches with `#[path = "../../wasm-guest/tests/common/traces.rs"]` (both
//! crates sit one level below the repo root, so one copy serves both).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The shared traces directory (it may not exist).
pub fn root() -> PathBuf {
    if let Some(dir) = std::env::var_os("FAULTLINE_TRACES").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    // CARGO_MANIFEST_DIR is the crate's directory, one level below the repo root.
    let beside = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/traces");
    if beside.is_dir() {
        return beside;
    }
    PathBuf::from("/work/shared/traces")
}

/// True when a missing trace must fail the test (`FAULTLINE_REQUIRE_TRACES` set, not `0`).
pub fn required() -> bool {
    std::env::var("FAULTLINE_REQUIRE_TRACES").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// `rel` (e.g. `"lttng/bug446190"`) under [`root`] when it exists. When it does not: a
/// panic under `FAULTLINE_REQUIRE_TRACES=1`, else `None` and a loud message (the caller
/// returns: skipped).
pub fn get(rel: &str) -> Option<PathBuf> {
    let p = root().join(rel);
    if p.exists() {
        return Some(p);
    }
    missing(&p);
    None
}

/// Reports a missing trace `p`: panics under `FAULTLINE_REQUIRE_TRACES=1`, else says loudly
/// that the test is skipped.
pub fn missing(p: &Path) {
    assert!(
        !required(),
        "real trace {} is missing and FAULTLINE_REQUIRE_TRACES is set \
         (FAULTLINE_TRACES={:?})",
        p.display(),
        std::env::var_os("FAULTLINE_TRACES")
    );
    eprintln!(
        "\n!!!!! SKIPPED: real trace {} is missing (set FAULTLINE_TRACES to the shared \
         traces directory) !!!!!\n",
        p.display()
    );
    // Listed at the end of scripts/test.sh like the plugin tests' skips
    // (plugin/tests/prereq/mod.rs, same line format; this file is shared with the engine's
    // tests, which cannot include that one).
    if let Some(log) = std::env::var_os("FAULTLINE_SKIP_LOG").filter(|l| !l.is_empty()) {
        use std::io::Write;
        let test = std::thread::current().name().unwrap_or("?").to_owned();
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            // One write: lines of tests running in parallel do not interleave.
            .and_then(|mut f| {
                f.write_all(format!("{test}: real trace {} is missing\n", p.display()).as_bytes())
            });
    }
}
