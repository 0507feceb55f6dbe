//! Shared by the perf source tests: whether perf can trace syscalls here. A missing `perf`
//! is a missing tool (fails under `FAULTLINE_REQUIRE_TOOLS=1`); a `perf` this machine does
//! not let trace (`perf_event_paranoid`, no tracefs) is a recorded skip. The including
//! test file also declares `mod prereq;`.

use std::process::Command;

use crate::prereq;

/// True when perf can trace syscalls here; otherwise reports why the test is skipped.
pub fn perf_usable() -> bool {
    let out = Command::new("perf")
        .args([
            "record",
            "-q",
            "-e",
            "raw_syscalls:sys_enter",
            "-o",
            "/dev/null",
            "--",
            "true",
        ])
        .output();
    match out {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            prereq::skip(&format!(
                "perf may not trace syscalls here (perf_event_paranoid={}): {}",
                std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                    .map_or_else(|_| "?".to_owned(), |p| p.trim().to_owned()),
                String::from_utf8_lossy(&o.stderr).trim()
            ));
            false
        }
        Err(e) => {
            prereq::missing_tool(&format!("perf ({e})"), "apt-get install linux-perf");
            false
        }
    }
}
