//! Which thread runs on each CPU, and which process and name each thread has, recovered from
//! scheduler and state-dump events — as Trace Compass does — for traces recorded without
//! `tid`/`pid`/`procname` contexts (the common case, and both shared test traces).

use std::collections::HashMap;

/// Threads remembered at most; beyond it new threads get no process mapping (their events
/// fall back to `pid = tid`) and the miss is counted, so memory stays bounded.
pub const MAX_THREADS: usize = 1 << 18;
/// CPUs tracked at most (an absurd `cpu_id` in a corrupt trace must not allocate gigabytes).
pub const MAX_CPUS: usize = 4096;

/// What is known about one thread.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadInfo {
    /// Thread-group id, when a fork or state-dump event told it.
    pub pid: Option<u32>,
    /// The thread's own name (`comm`), as last seen.
    pub comm: Vec<u8>,
    /// A syscall of this thread was seen: only such threads get scheduler records, so
    /// kernel threads (which make none) never become targets of their own.
    pub makes_syscalls: bool,
}

/// The thread a CPU runs, since a `sched_switch` at `since_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Running {
    pub tid: u32,
    pub since_ns: u64,
}

/// Scheduler-derived thread state.
#[derive(Debug, Default)]
pub struct Threads {
    /// Per CPU: the thread switched in last, and when.
    on_cpu: Vec<Option<Running>>,
    threads: HashMap<u32, ThreadInfo>,
    /// Threads not remembered because [`MAX_THREADS`] was reached.
    pub over_cap: u64,
}

impl Threads {
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
        let full = self.threads.len() >= MAX_THREADS;
        let info = match self.threads.get_mut(&tid) {
            Some(info) => info,
            None if full => {
                self.over_cap += 1;
                return;
            }
            None => self.threads.entry(tid).or_default(),
        };
        if pid.is_some() {
            info.pid = pid;
        }
        if let Some(comm) = comm {
            if info.comm != comm {
                info.comm.clear();
                info.comm.extend_from_slice(comm);
            }
        }
    }

    /// A syscall of `tid` was seen (remembered within [`MAX_THREADS`]).
    pub fn note_syscall(&mut self, tid: u32) {
        if let Some(info) = self.threads.get_mut(&tid) {
            info.makes_syscalls = true;
        } else if self.threads.len() < MAX_THREADS {
            self.threads.entry(tid).or_default().makes_syscalls = true;
        } else {
            self.over_cap += 1;
        }
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
        assert_eq!(
            t.get(42),
            Some(&ThreadInfo {
                pid: Some(40),
                comm: b"worker".to_vec(),
                makes_syscalls: false,
            })
        );
        t.forget(42);
        assert_eq!(t.get(42), None);
    }

    #[test]
    fn absurd_cpu_ids_are_ignored() {
        let mut t = Threads::default();
        assert_eq!(t.switch_in(u32::MAX, 1, None, 0), None);
        assert_eq!(t.running(u32::MAX), None);
    }
}
