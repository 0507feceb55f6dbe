//! What a test needs from the machine, and what happens when it is missing. Shared by
//! the plugin's integration tests (`mod prereq;`), `perf_support` and the crate's own
//! unit tests (`#[cfg(test)] #[path = "../../tests/prereq/mod.rs"] mod test_prereq;`).
//!
//! Two kinds of missing prerequisite:
//! - [`missing_tool`]: a program or library `scripts/setup.sh` installs (babeltrace2,
//!   promtool, perf, the OpenTelemetry SDK, ...). Under `FAULTLINE_REQUIRE_TOOLS=1`
//!   (exported by `scripts/test.sh`, which runs setup first) the test fails; otherwise it
//!   is skipped, as [`skip`] does.
//! - [`skip`]: a limit no install lifts (no PMU in a VM, `perf_event_paranoid`, not
//!   root, a machine too loaded for a rate the check needs). Always a skip, never silent.
//!
//! cargo hides what a passing test prints, so a skip is also appended as one line to the
//! file named by `FAULTLINE_SKIP_LOG`, which `scripts/test.sh` creates and prints (with a
//! count) at the end of the run, where a CI log is read.
#![allow(dead_code)] // each test file uses a different subset

use std::io::Write;

/// True under `FAULTLINE_REQUIRE_TOOLS` (set and not `0`): a missing installable
/// prerequisite fails its test.
pub fn tools_required() -> bool {
    std::env::var("FAULTLINE_REQUIRE_TOOLS").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// An installable prerequisite `what` is missing; `install` says how to get it. Panics
/// under `FAULTLINE_REQUIRE_TOOLS=1`; otherwise records the running test as skipped (the
/// caller then returns).
pub fn missing_tool(what: &str, install: &str) {
    assert!(
        !tools_required(),
        "{what} is missing and FAULTLINE_REQUIRE_TOOLS is set: {install} \
         (scripts/setup.sh installs it)"
    );
    skip(&format!("{what} is missing ({install})"));
}

/// Records that the running test skipped (all of it or the part named in `why`) for a
/// reason no install lifts: said on stderr and appended to `$FAULTLINE_SKIP_LOG`.
pub fn skip(why: &str) {
    let why = one_line(why);
    let line = format!("{}: {why}", test_name());
    eprintln!("\n!!!!! SKIPPED {line} !!!!!\n");
    let Some(log) = std::env::var_os("FAULTLINE_SKIP_LOG").filter(|p| !p.is_empty()) else {
        return;
    };
    // One short append per line: lines of tests running in parallel do not interleave.
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
    if let Err(e) = written {
        eprintln!("cannot append to FAULTLINE_SKIP_LOG {log:?}: {e}");
    }
}

/// `<test binary>::<test>`: libtest names each test's thread after the test.
fn test_name() -> String {
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|s| match s.rsplit_once('-') {
            // Cargo's `name-<16 hex digits>`.
            Some((name, hash))
                if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) =>
            {
                name.to_owned()
            }
            _ => s,
        })
        .unwrap_or_else(|| "?".to_owned());
    let thread = std::thread::current();
    format!("{binary}::{}", thread.name().unwrap_or("?"))
}

/// `text` on one line, shortened: a tool's multi-line stderr as a reason.
fn one_line(text: &str) -> String {
    let joined = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" | ");
    match joined.char_indices().nth(300) {
        Some((i, _)) => format!("{}...", &joined[..i]),
        None => joined,
    }
}
