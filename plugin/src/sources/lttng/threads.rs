//! Which thread runs on each CPU, and which process and name each thread has, recovered from
//! scheduler and state-dump events — as Trace Compass does — for traces recorded without
//! `tid`/`pid`/`procname` contexts (the common case, and both shared test traces).

use std::collections::HashMap;

use crate::sources::perf::batcher::clamp_comm;

/// Threads remembered at most, so memory stays bounded. Threads are forgotten on
/// `sched_process_free`, but traces often lack that event: when the table is full, the
/// threads seen longest ago make room (see `Threads::make_room`).
pub const MAX_THREADS: usize = 1 << 18;
/// When the table is full, this fraction of it (the threads seen longest ago) is evicted
/// in one pass, so the O(n) scan runs once per `cap / EVICT_FRACTION` new threads.
const EVICT_FRACTION: usize = 8;
/// CPUs tracked at most (an absurd `cpu_id` in a corrupt trace must not allocate gigabytes).
pub const MAX_CPUS: usize = 4096;

/// What is known about one thread.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadInfo {
    /// Thread-group id, when a fork or state-dump event told it.
    pub pid: Option<u32>,
    /// The thread's own name (`comm`), as last seen; cut like the kernel's (see
    /// [`crate::sources::perf::batcher::MAX_COMM_BYTES`]).
    pub comm: Vec<u8>,
    /// A syscall of this thread was seen: only such threads get scheduler records, so
    /// kernel threads (which make none) never become targets of their own.
    pub makes_syscalls: bool,
    /// When the thread was last seen, on the table's own clock (see [`Threads::make_room`]).
    last_seen: u64,
}

/// The thread a CPU runs, since a `sched_switch` at `since_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Running {
    pub tid: u32,
    pub since_ns: u64,
}

/// Scheduler-derived thread state.
#[derive(Debug)]
pub struct Threads {
    /// Per CPU: the thread switched in last, and when.
    on_cpu: Vec<Option<Running>>,
    threads: HashMap<u32, ThreadInfo>,
    /// Threads remembered at most ([`MAX_THREADS`]; smaller in tests).
    cap: usize,
    /// Ticks at every touch of a thread: orders threads by when they were last seen.
    clock: u64,
    /// Threads evicted to make room for new ones.
    pub evicted: u64,
}

impl Default for Threads {
    fn default() -> Self {
        Self::with_cap(MAX_THREADS)
    }
}

impl Threads {
    /// A table remembering at most `cap` threads.
    pub fn with_cap(cap: usize) -> Self {
        Self {
            on_cpu: Vec::new(),
            threads: HashMap::new(),
            cap: cap.max(1),
            clock: 0,
            evicted: 0,
        }
    }

    /// The thread running on `cpu`, if a `sched_switch` on it has been seen.
    pub fn running(&self, cpu: u32) -> Option<u32> {
        self.on_cpu
            .get(cpu as usize)
            .copied()
            .flatten()
            .map(|r| r.tid)
    }

    /// What is known about `tid`.
    pub fn get(&self, tid: u32) -> Option<&ThreadInfo> {
        self.threads.get(&tid)
    }

    /// `sched_switch` at `ts_ns`: `next_tid` (named `next_comm`) now runs on `cpu`.
    /// Returns the thread that ran there before and since when, if a switch showed it.
    pub fn switch_in(
        &mut self,
        cpu: u32,
        next_tid: u32,
        next_comm: Option<&[u8]>,
        ts_ns: u64,
    ) -> Option<Running> {
        let cpu = cpu as usize;
        if cpu >= MAX_CPUS {
            return None;
        }
        if self.on_cpu.len() <= cpu {
            self.on_cpu.resize(cpu + 1, None);
        }
        let before = self.on_cpu.get_mut(cpu).and_then(|slot| {
            slot.replace(Running {
                tid: next_tid,
                since_ns: ts_ns,
            })
        });
        if let Some(comm) = next_comm {
            self.update(next_tid, None, Some(comm));
        }
        before
    }

    /// A fork, state dump or context field told us `tid`'s process and/or name.
    pub fn update(&mut self, tid: u32, pid: Option<u32>, comm: Option<&[u8]>) {
        let info = self.touch(tid);
        if pid.is_some() {
            info.pid = pid;
        }
        if let Some(comm) = comm.map(clamp_comm) {
            if info.comm != comm {
                info.comm.clear();
                info.comm.extend_from_slice(comm);
            }
        }
    }

    /// A syscall of `tid` was seen.
    pub fn note_syscall(&mut self, tid: u32) {
        self.touch(tid).makes_syscalls = true;
    }

    /// `tid`'s entry, created if new (making room when the table is full), marked as
    /// seen now.
    fn touch(&mut self, tid: u32) -> &mut ThreadInfo {
        self.clock += 1;
        let now = self.clock;
        if self.threads.len() >= self.cap && !self.threads.contains_key(&tid) {
            self.make_room();
        }
        let info = self.threads.entry(tid).or_default();
        info.last_seen = now;
        info
    }

    /// Evicts the threads seen longest ago (an eighth of the table, at least one): without
    /// `sched_process_free` in the trace, exited threads are never forgotten otherwise,
    /// and after enough fork churn every new thread would go unnamed (`no_target`).
    fn make_room(&mut self) {
        if self.evicted == 0 {
            tracing::warn!(
                threads = self.threads.len(),
                "LTTng thread table full: forgetting the threads seen longest ago (enable the sched_process_free event so exited threads are forgotten as they go)"
            );
        }
        let mut seen: Vec<u64> = self.threads.values().map(|i| i.last_seen).collect();
        if seen.is_empty() {
            return;
        }
        let evict = (seen.len() / EVICT_FRACTION).clamp(1, seen.len());
        let cutoff = *seen.select_nth_unstable(evict - 1).1;
        // Ticks are unique per thread, so exactly `evict` threads are at or below the cutoff.
        self.threads.retain(|_, info| info.last_seen > cutoff);
        self.evicted += evict as u64;
    }

    /// `sched_process_free`: the thread id may be reused by an unrelated thread.
    pub fn forget(&mut self, tid: u32) {
        self.threads.remove(&tid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switch_tracks_cpu_and_name_while_fork_gives_pid() {
        let mut t = Threads::default();
        assert_eq!(t.running(3), None);
        assert_eq!(t.switch_in(3, 42, Some(b"worker"), 100), None);
        t.update(42, Some(40), None);
        assert_eq!(t.running(3), Some(42));
        assert_eq!(
            t.switch_in(3, 0, None, 250),
            Some(Running {
                tid: 42,
                since_ns: 100
            })
        );
        let info = t.get(42).unwrap();
        assert_eq!(info.pid, Some(40));
        assert_eq!(info.comm, b"worker");
        assert!(!info.makes_syscalls);
        t.forget(42);
        assert_eq!(t.get(42), None);
    }

    #[test]
    fn a_full_table_forgets_the_threads_seen_longest_ago() {
        let mut t = Threads::with_cap(16);
        for tid in 0..16 {
            t.update(tid, Some(tid), Some(b"old"));
        }
        // Thread 0 is still active; 1 and 2 were seen longest ago.
        t.note_syscall(0);
        t.update(100, Some(100), Some(b"new"));
        assert_eq!(t.get(100).map(|i| i.comm.as_slice()), Some(&b"new"[..]));
        assert!(t.get(0).is_some());
        assert!(t.get(1).is_none() && t.get(2).is_none());
        assert!((3..16).all(|tid| t.get(tid).is_some()));
        assert_eq!(t.evicted, 2);
        // Room was made for the next threads too: no eviction until full again.
        t.note_syscall(101);
        assert_eq!(t.evicted, 2);
        assert!(t.threads.len() <= 16);
    }

    #[test]
    fn a_huge_name_from_a_malformed_event_is_stored_cut() {
        let mut t = Threads::default();
        let huge = vec![b'n'; 1 << 20];
        t.update(1, Some(1), Some(&huge));
        t.switch_in(0, 2, Some(&huge), 10);
        for tid in [1, 2] {
            let comm = &t.get(tid).unwrap().comm;
            assert_eq!(comm, &huge[..crate::sources::perf::batcher::MAX_COMM_BYTES]);
            assert!(comm.capacity() < 1024, "{}", comm.capacity());
        }
    }

    #[test]
    fn absurd_cpu_ids_are_ignored() {
        let mut t = Threads::default();
        assert_eq!(t.switch_in(u32::MAX, 1, None, 0), None);
        assert_eq!(t.running(u32::MAX), None);
    }
}
