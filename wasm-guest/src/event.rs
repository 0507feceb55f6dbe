//! The normalized event every source is turned into before it reaches the engine.
//!
//! Kept `Copy` and free of strings so batches are flat arrays: the host routes events to
//! a target (and so carries the target name once per batch, not once per event).

use serde::{Deserialize, Serialize};

use crate::syscalls::SyscallId;

/// What one record says about a system call.
///
/// Sources either see whole calls (perf trace, OTLP spans, a duration attribute) or the
/// two halves separately (LTTng, `raw_syscalls:sys_enter`/`sys_exit`); the engine pairs
/// the halves per thread so both shapes analyse the same way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A finished call: `ts_ns` is its entry time and `duration_ns` its execution time.
    Complete,
    /// Entry half: `ts_ns` is the entry time; `duration_ns` is ignored.
    Enter,
    /// Exit half: `ts_ns` is the exit time. `syscall` may be [`SyscallId::UNKNOWN`] when the
    /// source has a generic exit record (old LTTng `exit_syscall`); the pending entry names it.
    Exit,
    /// Not a call: the thread ran on a CPU for `duration_ns`, ending at `ts_ns` (the
    /// scheduler's accounting, such as perf's `sched:sched_stat_runtime`); `syscall` is
    /// ignored. Tells a thread burning a CPU from one waiting for it (see
    /// [`crate::cpu_time`]).
    OnCpu,
    /// Not a call: the thread left its CPU at `ts_ns` (perf's `sched:sched_switch`, in the
    /// context of the thread switched out); `ret` is `Some(1)` when it left still runnable
    /// (preempted), `Some(2)` when it blocked uninterruptibly (perf's `D`: waiting for the
    /// kernel, such as a disk read or a page fault's I/O), `Some(0)` (or any other value)
    /// when it blocked otherwise. Tells a thread spinning among others that share its CPU
    /// from one that runs more because it waits in page faults, and a thread waiting in
    /// page faults outside any call from one waiting in its calls (see
    /// [`crate::cpu_time`]). `duration_ns` names the task switched in, when the source
    /// knows it (see [`SyscallEvent::switched_in`]): whether the CPU went idle, to another
    /// thread of the target, or to another process.
    OffCpu,
    /// Not a call: the source reports that records were lost before `ts_ns` (perf's
    /// `PERF_RECORD_LOST`, a ring-buffer overrun); `tid` and `syscall` are ignored. The
    /// loss may have taken an exit and the next entry of any thread, so an exit after
    /// it must not pair with an entry before it (that "call" would span the loss), and a
    /// thread's next call after it starts a new execution unit (its gap and inter-arrival
    /// times would span the loss too). See [`SyscallEvent::lost`].
    Lost,
    /// Not a call: thread `tid`'s hardware/software counters over the `duration_ns`
    /// ending at `ts_ns` (`perf` holds the deltas; `0` when the interval is not known,
    /// e.g. one sample of a sampled counter). From a source that samples counters per
    /// thread (perf's sampled `cycles`, `instructions`, `cache-misses`), not per call.
    /// Summed into the target's and the thread's vital signs (see
    /// [`crate::vital_signs`]); the syscall analysis ignores it. See
    /// [`SyscallEvent::counters`].
    Counters,
    /// Not a call: the TCP segments the target's network namespace sent over the
    /// interval ending at `ts_ns`, and how many of them it retransmitted (the kernel's
    /// `Tcp: OutSegs` and `RetransSegs` deltas, from `/proc/<pid>/net/snmp`); `tid` and
    /// `syscall` are ignored. Packet loss on the path shows here even when no call of
    /// the target slows: a non-blocking server's sends return at once and the kernel
    /// retransmits behind them (see [`crate::net_loss`], [`SyscallEvent::tcp_segments`]).
    TcpSegments,
}

/// Hardware/software counters sampled with a call, when the source has them.
///
/// Each is a delta over the call, or over the interval of an [`EventKind::Counters`]
/// record (`0` when not measured); summed into ChopStix-style vital signs
/// ([`crate::vital_signs`]), such as a busy loop showing as many cycles with few cache
/// misses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PerfCounters {
    pub cycles: u64,
    pub instructions: u64,
    pub cache_misses: u64,
    pub context_switches: u64,
}

/// One system-call record of one thread of a monitored target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyscallEvent {
    /// Process id (thread-group id).
    pub pid: u32,
    /// OS thread id; the unit of PerfCompass's analysis.
    pub tid: u32,
    /// Which call; see [`crate::syscalls`] for the name and number tables.
    pub syscall: SyscallId,
    pub kind: EventKind,
    /// Nanoseconds in the source's clock: entry time for `Complete`/`Enter`, exit time for `Exit`.
    pub ts_ns: u64,
    /// Execution time in nanoseconds, for `Complete` records; for `OffCpu` records the task
    /// switched in, as `1 + tid` (`1`: the idle task; `0`: not known), so the batch
    /// layout stays as it is (see [`SyscallEvent::switched_in`]).
    pub duration_ns: u64,
    /// Return value, when known (negative errno on failure).
    pub ret: Option<i64>,
    /// Counters sampled with the call, when the source has them.
    pub perf: Option<PerfCounters>,
}

impl SyscallEvent {
    /// A finished call; the common shape for sources that already know the duration.
    pub fn complete(
        pid: u32,
        tid: u32,
        syscall: SyscallId,
        enter_ns: u64,
        duration_ns: u64,
    ) -> Self {
        Self {
            pid,
            tid,
            syscall,
            kind: EventKind::Complete,
            ts_ns: enter_ns,
            duration_ns,
            ret: None,
            perf: None,
        }
    }

    /// The entry half of a call.
    pub fn enter(pid: u32, tid: u32, syscall: SyscallId, ts_ns: u64) -> Self {
        Self {
            pid,
            tid,
            syscall,
            kind: EventKind::Enter,
            ts_ns,
            duration_ns: 0,
            ret: None,
            perf: None,
        }
    }

    /// A run of `runtime_ns` on a CPU that ended at `ts_ns`.
    pub fn on_cpu(pid: u32, tid: u32, ts_ns: u64, runtime_ns: u64) -> Self {
        Self {
            pid,
            tid,
            syscall: SyscallId::UNKNOWN,
            kind: EventKind::OnCpu,
            ts_ns,
            duration_ns: runtime_ns,
            ret: None,
            perf: None,
        }
    }

    /// A switch away from the CPU at `ts_ns`: `preempted` when the thread was still
    /// runnable, so it wanted to go on running.
    pub fn off_cpu(pid: u32, tid: u32, ts_ns: u64, preempted: bool) -> Self {
        Self {
            pid,
            tid,
            syscall: SyscallId::UNKNOWN,
            kind: EventKind::OffCpu,
            ts_ns,
            duration_ns: 0,
            ret: Some(i64::from(preempted)),
            perf: None,
        }
    }

    /// This switch away, blocked uninterruptibly (perf's `D` state) rather than asleep
    /// (see [`EventKind::OffCpu`]): outside any call, in practice, only a page fault waits
    /// so (see [`crate::cpu_time::PagingTest`]). A preemption stays one.
    pub fn uninterruptible(self) -> Self {
        if self.kind != EventKind::OffCpu || self.ret == Some(1) {
            return self;
        }
        Self {
            ret: Some(Self::UNINTERRUPTIBLE),
            ..self
        }
    }

    /// `ret` of an [`EventKind::OffCpu`] record that blocked uninterruptibly.
    pub const UNINTERRUPTIBLE: i64 = 2;

    /// For an [`EventKind::OffCpu`] record, whether the thread left still runnable.
    #[inline]
    pub fn preempted(&self) -> bool {
        self.kind == EventKind::OffCpu && self.ret == Some(1)
    }

    /// For an [`EventKind::OffCpu`] record, whether the thread blocked uninterruptibly.
    #[inline]
    pub fn blocked_uninterruptibly(&self) -> bool {
        self.kind == EventKind::OffCpu && self.ret == Some(Self::UNINTERRUPTIBLE)
    }

    /// A switch away from the CPU at `ts_ns` that handed it to task `next_tid` (`0`: the
    /// CPU's idle task). Who got the CPU tells an environment taking it (another process)
    /// from the target's own threads queueing for it (see [`crate::cpu_time`]).
    pub fn off_cpu_to(pid: u32, tid: u32, ts_ns: u64, preempted: bool, next_tid: u32) -> Self {
        Self {
            duration_ns: u64::from(next_tid) + 1,
            ..Self::off_cpu(pid, tid, ts_ns, preempted)
        }
    }

    /// A report that records of process `pid` may have been lost before `ts_ns` (see
    /// [`EventKind::Lost`]): without it, a lost exit and a lost entry of the same
    /// syscall on a thread pair its earlier entry with its later exit, one long call
    /// that never happened.
    pub fn lost(pid: u32, ts_ns: u64) -> Self {
        Self {
            pid,
            tid: 0,
            syscall: SyscallId::UNKNOWN,
            kind: EventKind::Lost,
            ts_ns,
            duration_ns: 0,
            ret: None,
            perf: None,
        }
    }

    /// Thread `tid`'s counters over the `interval_ns` ending at `ts_ns` (see
    /// [`EventKind::Counters`]).
    pub fn counters(pid: u32, tid: u32, ts_ns: u64, interval_ns: u64, perf: PerfCounters) -> Self {
        Self {
            pid,
            tid,
            syscall: SyscallId::UNKNOWN,
            kind: EventKind::Counters,
            ts_ns,
            duration_ns: interval_ns,
            ret: None,
            perf: Some(perf),
        }
    }

    /// The TCP segments process `pid`'s network namespace sent in the interval ending at
    /// `ts_ns`, `retransmitted` of them sent again (see [`EventKind::TcpSegments`]). The
    /// counts ride in `duration_ns` and `ret` so the batch layout stays as it is.
    pub fn tcp_segments(pid: u32, ts_ns: u64, sent: u64, retransmitted: u64) -> Self {
        Self {
            pid,
            tid: 0,
            syscall: SyscallId::UNKNOWN,
            kind: EventKind::TcpSegments,
            ts_ns,
            duration_ns: sent,
            ret: Some(i64::try_from(retransmitted).unwrap_or(i64::MAX)),
            perf: None,
        }
    }

    /// For an [`EventKind::TcpSegments`] record, (segments sent, segments retransmitted);
    /// `None` for any other record.
    #[inline]
    pub fn segments(&self) -> Option<(u64, u64)> {
        if self.kind != EventKind::TcpSegments {
            return None;
        }
        let retransmitted = self.ret.map_or(0, |r| u64::try_from(r).unwrap_or(0));
        Some((self.duration_ns, retransmitted))
    }

    /// For an [`EventKind::OffCpu`] record, the task switched in (`Some(0)`: the idle
    /// task), when the source said; `None` otherwise.
    #[inline]
    pub fn switched_in(&self) -> Option<u32> {
        if self.kind != EventKind::OffCpu || self.duration_ns == 0 {
            return None;
        }
        u32::try_from(self.duration_ns - 1).ok()
    }

    /// Whether this is a scheduler record ([`EventKind::OnCpu`] or [`EventKind::OffCpu`])
    /// rather than a call half.
    #[inline]
    pub fn is_scheduling(&self) -> bool {
        matches!(self.kind, EventKind::OnCpu | EventKind::OffCpu)
    }

    /// The exit half of a call.
    pub fn exit(pid: u32, tid: u32, syscall: SyscallId, ts_ns: u64, ret: Option<i64>) -> Self {
        Self {
            pid,
            tid,
            syscall,
            kind: EventKind::Exit,
            ts_ns,
            duration_ns: 0,
            ret,
            perf: None,
        }
    }
}
