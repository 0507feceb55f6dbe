//! One plain-language sentence per diagnosis, for the on-call engineer.
//!
//! PerfCompass's Tables 4–5 turn a verdict plus the most affected syscalls into a hint
//! ("increase in execution time of sys_futex and sys_write indicates a blocking I/O
//! problem"); this module does the same from the report's verdict and subsystem, so a
//! dashboard or alert can show what to check first without reading the numbers.

use crate::report::{Subsystem, Verdict};

/// The hint for a diagnosis: what the pattern means and where to look first.
///
/// `top_syscall` (the most affected call, if the ranking found one) is named in the
/// sentence; names that do not look like a syscall name are left out rather than echoed.
pub fn hint(verdict: Verdict, subsystem: Subsystem, top_syscall: Option<&str>) -> String {
    let (lead, advice) = match verdict {
        Verdict::None => {
            return "No anomaly: every thread's syscall latencies and rates stayed within \
                    their baselines in this window."
                .to_string()
        }
        Verdict::External => external(subsystem),
        Verdict::Internal => internal(subsystem),
    };
    match top_syscall.filter(|s| looks_like_syscall(s)) {
        Some(name) => format!("{lead} (most affected: {name}): {advice}."),
        None => format!("{lead}: {advice}."),
    }
}

/// Global impact: the environment starved every thread of the subsystem's resource.
fn external(subsystem: Subsystem) -> (&'static str, &'static str) {
    match subsystem {
        Subsystem::CpuScheduling => (
            "Every thread slowed at once and scheduling-related calls stretched",
            "the host is short of CPU (check the cgroup CPU quota, steal time and noisy \
             neighbours)",
        ),
        Subsystem::Memory => (
            "Every thread slowed at once and memory-management calls stretched",
            "the host or cgroup is short of memory (check the memory limit, swapping, \
             reclaim and OOM events)",
        ),
        Subsystem::DiskIo => (
            "Every thread slowed at once and file and disk I/O calls stretched",
            "the disk is contended or throttled (check device latency and utilisation, \
             I/O limits and co-located disk-heavy jobs)",
        ),
        Subsystem::NetworkIo => (
            "Every thread slowed at once and network calls stretched",
            "the network is degraded (check packet loss, retransmissions, bandwidth limits \
             and the health of the peers)",
        ),
        Subsystem::Locking => (
            "Every thread slowed at once and futex and lock waits grew",
            "threads queue on locks because the whole host slowed them down (check the CPU \
             quota and memory pressure first, then shared dependencies)",
        ),
        Subsystem::ProcessManagement => (
            "Every thread slowed at once and process and signal calls stretched",
            "the host struggles to create and schedule tasks (check the CPU quota, PID and \
             thread limits and memory pressure)",
        ),
        Subsystem::Other | Subsystem::None => (
            "Every thread slowed at once",
            "the environment is the likely cause (check the host's CPU, memory, disk and \
             network and its noisy neighbours)",
        ),
    }
}

/// Local impact: a bug in the service's own code, seen through the subsystem it hammers.
fn internal(subsystem: Subsystem) -> (&'static str, &'static str) {
    match subsystem {
        Subsystem::CpuScheduling => (
            "Only some threads are affected and their scheduling calls (yields, sleeps) \
             changed",
            "look for a spin or back-off loop, or a busy thread starving the others, in \
             the service's code",
        ),
        Subsystem::Memory => (
            "Only some threads are affected and their memory-management calls grew",
            "look for a leak, a runaway allocation or an oversized query or buffer in the \
             affected code path",
        ),
        Subsystem::DiskIo => (
            "Only some threads are affected and their file and disk I/O calls changed",
            "look for a loop repeating reads or writes, an unbounded scan or a flushing bug \
             in the service's code",
        ),
        Subsystem::NetworkIo => (
            "Only some threads are affected and their network calls changed",
            "look for a retry loop on a socket, a missing timeout or a stuck request \
             handler in the service's code",
        ),
        Subsystem::Locking => (
            "Only some threads are affected and futex waits grew",
            "look for lock contention or a deadlock in the service's code (a table or row \
             lock held too long, a shared variable polled in a loop)",
        ),
        Subsystem::ProcessManagement => (
            "Only some threads are affected and their process and signal calls grew",
            "look for a fork, exec or signal loop, or a pool repeatedly respawning workers, \
             in the service's code",
        ),
        Subsystem::Other | Subsystem::None => (
            "Only some threads are affected",
            "the cause is likely a bug in the service's own code (start from the affected \
             threads' stack traces)",
        ),
    }
}

/// Syscall names are short lower-case identifiers; anything else is not echoed into a
/// sentence that may end up in an alert.
fn looks_like_syscall(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Words a hint must contain to be about this subsystem.
    fn subsystem_word(subsystem: Subsystem, verdict: Verdict) -> &'static str {
        match (subsystem, verdict) {
            (Subsystem::CpuScheduling, _) => "scheduling",
            (Subsystem::Memory, _) => "memory",
            (Subsystem::DiskIo, _) => "disk",
            (Subsystem::NetworkIo, _) => "network",
            (Subsystem::Locking, _) => "lock",
            (Subsystem::ProcessManagement, _) => "process",
            (Subsystem::Other | Subsystem::None, Verdict::External) => "environment",
            (Subsystem::Other | Subsystem::None, _) => "own code",
        }
    }

    #[test]
    fn every_combination_names_its_verdict_and_subsystem() {
        for verdict in Verdict::ALL {
            for subsystem in Subsystem::ALL {
                let text = hint(verdict, subsystem, None);
                assert!(text.ends_with('.'), "{text}");
                // One sentence: no full stop before the end.
                assert!(!text[..text.len() - 1].contains(". "), "{text}");
                match verdict {
                    Verdict::None => assert!(text.starts_with("No anomaly"), "{text}"),
                    Verdict::External => {
                        assert!(text.starts_with("Every thread"), "{text}");
                        let word = subsystem_word(subsystem, verdict);
                        assert!(text.contains(word), "{verdict:?}/{subsystem:?}: {text}");
                    }
                    Verdict::Internal => {
                        assert!(text.starts_with("Only some threads"), "{text}");
                        let word = subsystem_word(subsystem, verdict);
                        assert!(text.contains(word), "{verdict:?}/{subsystem:?}: {text}");
                    }
                }
            }
        }
    }

    #[test]
    fn hints_differ_between_verdicts_and_subsystems() {
        let mut seen = std::collections::HashSet::new();
        for verdict in [Verdict::External, Verdict::Internal] {
            // Other and None share a sentence: neither names a subsystem.
            for subsystem in &Subsystem::ALL[..7] {
                assert!(seen.insert(hint(verdict, *subsystem, None)));
            }
        }
    }

    #[test]
    fn the_top_syscall_is_named_when_it_is_a_syscall_name() {
        let text = hint(Verdict::Internal, Subsystem::Locking, Some("futex"));
        assert!(text.contains("(most affected: futex)"), "{text}");
        let text = hint(Verdict::External, Subsystem::DiskIo, Some("fsync"));
        assert!(text.contains("fsync"), "{text}");
        for odd in ["", "rm -rf /", "<script>", &"x".repeat(65)] {
            let text = hint(Verdict::External, Subsystem::DiskIo, Some(odd));
            assert_eq!(text, hint(Verdict::External, Subsystem::DiskIo, None));
        }
        // No anomaly, no syscall to blame.
        let text = hint(Verdict::None, Subsystem::Other, Some("futex"));
        assert!(!text.contains("futex"));
    }
}
