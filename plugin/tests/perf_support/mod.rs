//! Shared by the perf source tests: whether perf can trace syscalls here, so a machine
//! without it skips those tests loudly instead of failing them.

use std::process::Command;

/// True when perf can trace syscalls here; otherwise says loudly why the test is skipped.
pub fn perf_usable() -> bool {
    let ok = Command::new("perf")
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
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!(
            "\n!!!!! SKIPPED: `perf` missing or not permitted to trace syscalls here !!!!!\n"
        );
    }
    ok
}
