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
            "Every thread slowed at once, waiting for a CPU: the host is short of CPU (check the cgroup CPU quota, steal time and noisy neighbours) or, if threads stalled for seconds, of memory."
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
            "Only some threads are affected, waiting on other threads or processes (lock waits grew, or requests stopped mid-way in a wait): look for lock contention or a deadlock in the service's code."
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
    with_top(base, verdict, top)
}

/// The hint for an environment verdict with a CPU quota throttling the target (see
/// [`crate::cpu_time::ThrottleTest`]): the quota, not a busy host, is what to raise, and
/// "every thread slowed at once" may not be what its calls showed.
pub fn throttled(top: Option<&RankedSyscall>) -> String {
    with_top(
        "A CPU quota throttles the service: its threads were stopped while runnable, with the CPU left idle (check the cgroup or container CPU limit, cpu.max, and its throttling counters).",
        Verdict::External,
        top,
    )
}

/// The hint of an anomaly the TCP account shows as packet loss (see
/// [`crate::net_loss::LossTest`]): the path to name, since the calls may show nothing at
/// all. The shares that say so are in the report's `tcp_retransmits`, not here: the hint
/// is a metric label (see `with_top`).
pub fn packet_loss(top: Option<&RankedSyscall>) -> String {
    with_top(
        "Packets are being lost: the service's network namespace retransmits a rising share of the TCP segments it sends (see tcp_retransmits; check the interfaces, links and path to the clients for drops and errors; the service's calls may not slow, since the kernel retransmits behind them).",
        Verdict::External,
        top,
    )
}

/// The hint of an anomaly during which the target's threads waited in page faults (see
/// [`crate::cpu_time::PagingTest`]): memory is what to check, whichever calls slowed
/// after the faults; the verdict says whose memory use to suspect.
pub fn paging(verdict: Verdict, top: Option<&RankedSyscall>) -> String {
    let base = match verdict {
        Verdict::Internal => {
            "Some threads wait in page faults: the service's memory use outgrew what it has (look for a leak or a cache grown past its memory limit)."
        }
        _ => {
            "The service's threads wait in page faults: the host or cgroup is short of memory (check the memory limit, reclaim and major-fault rates, and swap)."
        }
    };
    with_top(base, verdict, top)
}

/// `base` and the top-ranked syscall's name. Not its increase, which is in the ranked
/// list: the hint is the `hint` label of `faultline_diagnosis_info`, and a number that
/// changes every report would make a new series every cadence while an anomaly lasts.
fn with_top(base: &str, verdict: Verdict, top: Option<&RankedSyscall>) -> String {
    match (verdict, top) {
        (Verdict::None, _) | (_, None) => base.to_string(),
        (_, Some(t)) => format!("{base} Most increased: {}.", t.syscall),
    }
}

/// The hint of a report whose window ends a cadence or more after the target's latest
/// record: said first, as a target that makes no call at all is what the on-call
/// engineer sees (a hung or frozen service). Without the number of seconds, which is in
/// `silent_seconds`: the hint is a metric label, and a new value every cadence would be a
/// new series. Every thread stopped at once is the environment: the
/// service stopped from outside, which the verdict's own sentence would not name (a
/// frozen cgroup leaves threads inside their calls as well as between them), or all
/// of it waiting on one stalled resource, which that sentence then names. `asleep`: its
/// host saw every thread asleep in a wait (see [`crate::Stillness`]), so nothing stopped
/// it from outside: it waits for work (idle, or for a peer that does not answer: the
/// records cannot tell), or on something its own threads hold. `between_calls`: the
/// report's evidence is of threads stopped between their calls (waiting for a CPU, or in
/// page faults), not inside them.
pub fn silent(verdict: Verdict, between_calls: bool, hint: &str, asleep: bool) -> String {
    let head = "The target makes no system call";
    const OUTSIDE: &str =
        "the service was stopped from outside (a frozen cgroup or container, SIGSTOP, a paused VM)";
    if asleep {
        return match verdict {
            Verdict::None => {
                format!(
                    "{head}: every thread sleeps in a wait it usually makes, none stuck elsewhere: no work reaches it (no client, or what it waits on does not answer)."
                )
            }
            _ => {
                format!("{head}: every thread sleeps in a call, none stopped from outside. {hint}")
            }
        };
    }
    match (verdict, between_calls) {
        (Verdict::External, true) => format!(
            "{head}: every thread stopped between its calls at once, so {OUTSIDE} or the host is starved of CPU or memory."
        ),
        (Verdict::External, _) => format!(
            "{head}: every thread stopped at once inside its calls, so {OUTSIDE} or what they all wait on stalled. {hint}"
        ),
        _ => format!("{head}: its threads are stopped or all wait in a call. {hint}"),
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

    #[test]
    fn a_hint_does_not_change_with_the_measured_numbers() {
        // The hint is a metric label: the same finding must give the same text.
        let top = |ratio: f64| RankedSyscall {
            syscall: "pread64".into(),
            increase_ratio: ratio,
            subsystem: Subsystem::DiskIo,
        };
        let (a, b) = (top(0.53), top(12.5));
        for v in [Verdict::External, Verdict::Internal] {
            let h = hint_for(v, Subsystem::DiskIo, Some(&a));
            assert_eq!(h, hint_for(v, Subsystem::DiskIo, Some(&b)));
            assert!(h.ends_with("Most increased: pread64."), "{h}");
            assert_eq!(paging(v, Some(&a)), paging(v, Some(&b)));
        }
        assert_eq!(throttled(Some(&a)), throttled(Some(&b)));
        assert_eq!(packet_loss(Some(&a)), packet_loss(Some(&b)));
    }

    #[test]
    fn a_silent_target_says_so_first() {
        let disk = hint_for(Verdict::External, Subsystem::DiskIo, None);
        let h = silent(Verdict::External, false, &disk, false);
        assert!(
            h.starts_with("The target makes no system call: every thread stopped"),
            "{h}"
        );
        assert!(h.ends_with("device latency)."), "{h}");
        assert!(h.contains("stopped from outside"), "{h}");
        let lock = hint_for(Verdict::Internal, Subsystem::Locking, None);
        let h = silent(Verdict::Internal, false, &lock, false);
        assert!(h.ends_with(&lock) && !h.contains("outside"), "{h}");
        let cpu = hint_for(Verdict::External, Subsystem::CpuScheduling, None);
        let h = silent(Verdict::External, true, &cpu, false);
        assert!(h.contains("stopped from outside"), "{h}");
    }

    #[test]
    fn an_asleep_target_is_not_said_to_be_stopped_from_outside() {
        let lock = hint_for(Verdict::Internal, Subsystem::Locking, None);
        let h = silent(Verdict::Internal, false, &lock, true);
        assert!(h.starts_with("The target makes no system call"), "{h}");
        assert!(
            h.ends_with(&lock) && h.contains("none stopped from outside"),
            "{h}"
        );
        let none = hint_for(Verdict::None, Subsystem::None, None);
        let h = silent(Verdict::None, false, &none, true);
        assert!(h.contains("no work reaches it"), "{h}");
    }
}
