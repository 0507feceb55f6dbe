//! The one plain-language sentence of a report, from the verdict, the subsystem and the
//! top-ranked syscall (PerfCompass Tables 4–5 turn the affected syscalls into such
//! hints), so a dashboard or alert says what to check first; the top syscall's name and
//! increase point at the evidence.

use crate::report::{RankedSyscall, Subsystem, Verdict};

/// The hint for a report.
pub fn hint_for(verdict: Verdict, subsystem: Subsystem, top: Option<&RankedSyscall>) -> String {
    let base = match (verdict, subsystem) {
        (Verdict::None, _) => "No anomaly: every thread behaves like its learned baseline.",
        (Verdict::External, Subsystem::CpuScheduling) => {
            "Every thread slowed at once, mostly between its system calls: the host is short of CPU (check the cgroup CPU quota, steal time and noisy neighbours) or, if threads stalled for seconds, of memory."
        }
        (Verdict::External, Subsystem::Memory) => {
            "Every thread slowed at once in memory-related calls: the host or cgroup is short of memory (check the memory limit, swapping and page-fault rates)."
        }
        (Verdict::External, Subsystem::DiskIo) => {
            "Disk I/O calls slowed in every thread doing I/O: the disk is contended (check co-located writers and device latency)."
        }
        (Verdict::External, Subsystem::NetworkIo) => {
            "Network calls slowed in every thread talking to the network: the network is degraded (check packet loss, retransmissions and the path to clients)."
        }
        (Verdict::External, Subsystem::Locking) => {
            "Lock waits grew in every thread at once: a shared resource slowed down for all (often CPU contention making lock holders slow)."
        }
        (Verdict::External, _) => {
            "Every thread slowed at once: the environment is the likely cause (check CPU, memory, disk and network of the host)."
        }
        (Verdict::Internal, Subsystem::Locking) => {
            "Only some threads are affected and their lock waits grew: look for lock contention or a deadlock in the service's code."
        }
        (Verdict::Internal, Subsystem::CpuScheduling) => {
            "Only some threads are affected, spending longer between calls: look for a CPU-heavy loop or query in the service."
        }
        (Verdict::Internal, Subsystem::DiskIo) | (Verdict::Internal, Subsystem::NetworkIo) => {
            "Only some threads are affected in I/O calls: look at the code paths doing that I/O (retry loops, blocking calls)."
        }
        (Verdict::Internal, _) => {
            "Only some threads are affected, at different times: the service's own code is the likely cause."
        }
    };
    match (verdict, top) {
        (Verdict::None, _) | (_, None) => base.to_string(),
        (_, Some(t)) => format!(
            "{base} Most increased: {} (+{:.0} %).",
            t.syscall,
            t.increase_ratio * 100.0
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_verdict_has_a_sentence() {
        for v in Verdict::ALL {
            let h = hint_for(v, Subsystem::DiskIo, None);
            assert!(h.ends_with('.') && h.len() > 20);
        }
    }
}
