//! Affected-syscall ranking (PerfCompass §3.5): per syscall type, the largest relative
//! increase of execution time and of frequency seen in the first affected execution
//! unit of each affected thread, as two ranked lists.
//!
//! Only increases above the outlier floor (`min_time_increase` / `min_frequency_increase`)
//! are ranked, so a list may be shorter than `top_n` (the paper's "Frequency: None").
//! The off-CPU gap channel is not a syscall and is reported separately
//! (`Report::cpu_gap_increase_ratio`), but it votes for the CPU-scheduling subsystem.

use crate::report::{RankedSyscall, Subsystem};
use crate::syscalls::SyscallId;
use crate::thread::{Increase, GAP_KEY};

/// Accumulates the maxima over the affected threads' first affected units.
#[derive(Debug, Default)]
pub struct Ranking {
    time: Vec<(u16, f32)>,
    freq: Vec<(u16, f32)>,
    /// Largest gap (off-CPU time between calls) increase.
    pub gap: Option<f32>,
}

fn bump(list: &mut Vec<(u16, f32)>, key: u16, v: f32) {
    match list.iter_mut().find(|(k, _)| *k == key) {
        Some(e) => e.1 = e.1.max(v),
        None => list.push((key, v)),
    }
}

impl Ranking {
    /// Adds one episode's increases, keeping those above the floors.
    pub fn add(&mut self, incs: &[Increase], min_time: f32, min_freq: f32) {
        for inc in incs.iter().filter(|i| i.time > 0.0 || i.freq > 0.0) {
            if inc.key == GAP_KEY {
                if inc.time >= min_time {
                    self.gap = Some(self.gap.unwrap_or(0.0).max(inc.time));
                }
                continue;
            }
            if inc.time >= min_time {
                bump(&mut self.time, inc.key, inc.time);
            }
            if inc.freq >= min_freq {
                bump(&mut self.freq, inc.key, inc.freq);
            }
        }
    }

    fn ranked(list: &[(u16, f32)], top_n: usize) -> Vec<RankedSyscall> {
        let mut v = list.to_vec();
        v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        v.into_iter()
            .take(top_n)
            .map(|(k, r)| {
                let id = SyscallId(k);
                RankedSyscall {
                    syscall: id.name().to_string(),
                    increase_ratio: r as f64,
                    subsystem: id.subsystem(),
                }
            })
            .collect()
    }

    /// Top `top_n` syscalls by execution-time increase.
    pub fn by_time(&self, top_n: usize) -> Vec<RankedSyscall> {
        Self::ranked(&self.time, top_n)
    }

    /// Top `top_n` syscalls by frequency increase.
    pub fn by_frequency(&self, top_n: usize) -> Vec<RankedSyscall> {
        Self::ranked(&self.freq, top_n)
    }
}

/// What an affected thread's evidence points at, for [`dominant_subsystem`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vote {
    /// The channel that confirmed its outlier: a syscall's class, or CPU scheduling for
    /// the gap channel.
    Channel(u16),
    /// It stopped in its usual wait in the middle of a request: it waits on another
    /// thread or process (a lock), whatever call it waits in (PostgreSQL's backends
    /// wait for locks in `epoll_wait`, a network call by name).
    WaitsOnPeer,
}

/// The subsystem most of the affected threads' confirming channels point at.
///
/// Each affected thread votes with the channel that confirmed its outlier (the gap
/// channel votes CPU scheduling), or for locking when it waits on a peer (see
/// [`Vote`]); ties go to the subsystem of the top time-ranked call.
pub fn dominant_subsystem(votes: &[Vote], top_time: Option<&RankedSyscall>) -> Subsystem {
    // A call on any descriptor (`read`, `write`, `close`) is I/O of the kind the other
    // votes' I/O calls name: a web server's threads that read and write sockets and
    // wait in `poll` under packet loss are network-bound (measured: Apache, 27 of 32
    // votes on `read`, `writev` and `close`, 5 on `poll`, read disk I/O). Disk when the
    // others name disk as often, or no I/O at all.
    let (mut disk, mut network) = (0u32, 0u32);
    for k in votes.iter().filter_map(|v| match *v {
        Vote::Channel(k) => Some(k),
        Vote::WaitsOnPeer => None,
    }) {
        let id = SyscallId(k);
        if k != GAP_KEY && !id.fd_generic() {
            match id.subsystem() {
                Subsystem::DiskIo => disk += 1,
                Subsystem::NetworkIo => network += 1,
                _ => {}
            }
        }
    }
    let mut counts: Vec<(Subsystem, u32)> = Vec::new();
    for &v in votes {
        let s = match v {
            Vote::WaitsOnPeer => Subsystem::Locking,
            Vote::Channel(GAP_KEY) => Subsystem::CpuScheduling,
            Vote::Channel(k) if SyscallId(k).fd_generic() && network > disk => Subsystem::NetworkIo,
            Vote::Channel(k) => SyscallId(k).subsystem(),
        };
        match counts.iter_mut().find(|(x, _)| *x == s) {
            Some(e) => e.1 += 1,
            None => counts.push((s, 1)),
        }
    }
    let best = counts.iter().map(|c| c.1).max().unwrap_or(0);
    if best == 0 {
        return Subsystem::None;
    }
    let tied: Vec<Subsystem> = counts.iter().filter(|c| c.1 == best).map(|c| c.0).collect();
    // The top call's class as its votes would count.
    let top = top_time.map(|t| match SyscallId::from_name(&t.syscall) {
        id if id.fd_generic() && network > disk => Subsystem::NetworkIo,
        _ => t.subsystem,
    });
    match (tied.as_slice(), top) {
        ([one], _) => *one,
        (many, Some(t)) if many.contains(&t) => t,
        (many, _) => many.iter().min().copied().unwrap_or(Subsystem::Other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by(keys: &[u16]) -> Vec<Vote> {
        keys.iter().map(|&k| Vote::Channel(k)).collect()
    }

    #[test]
    fn keeps_maxima_above_floor_and_orders() {
        let mut r = Ranking::default();
        let inc = |key, time, freq| Increase { key, time, freq };
        r.add(
            &[inc(1, 2.0, 0.0), inc(2, 0.1, 5.0), inc(GAP_KEY, 9.0, 0.0)],
            0.5,
            1.0,
        );
        r.add(&[inc(1, 3.0, 0.0), inc(3, 1.0, 0.0)], 0.5, 1.0);
        let t = r.by_time(5);
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].increase_ratio, 3.0);
        assert_eq!(t[1].increase_ratio, 1.0);
        assert_eq!(r.by_frequency(5).len(), 1);
        assert_eq!(r.gap, Some(9.0));
        assert_eq!(r.by_time(1).len(), 1);
    }

    #[test]
    fn gap_votes_cpu() {
        assert_eq!(
            dominant_subsystem(&by(&[GAP_KEY, GAP_KEY, 1]), None),
            Subsystem::CpuScheduling
        );
        assert_eq!(dominant_subsystem(&[], None), Subsystem::None);
    }

    #[test]
    fn calls_on_any_descriptor_vote_with_the_unambiguous_io_calls() {
        let id = |name| SyscallId::from_name(name).0;
        let (read, writev, close) = (id("read"), id("writev"), id("close"));
        // The Apache packet loss: sockets read and written, `poll` slowed.
        let apache = [
            read,
            read,
            read,
            writev,
            writev,
            close,
            id("poll"),
            id("poll"),
        ];
        assert_eq!(dominant_subsystem(&by(&apache), None), Subsystem::NetworkIo);
        // The same calls beside a flush read disk, as by name.
        let flushing = [read, read, writev, id("fdatasync"), id("poll")];
        assert_eq!(dominant_subsystem(&by(&flushing), None), Subsystem::DiskIo);
        // Alone, or beside no other I/O call, they keep their class.
        assert_eq!(
            dominant_subsystem(&by(&[read, read]), None),
            Subsystem::DiskIo
        );
        assert_eq!(
            dominant_subsystem(&by(&[read, id("futex"), id("futex"), id("futex")]), None),
            Subsystem::Locking
        );
        // A tie goes to the top call's class as its votes count.
        let top = RankedSyscall {
            syscall: "read".into(),
            increase_ratio: 1.0,
            subsystem: Subsystem::DiskIo,
        };
        let tied = [read, id("poll"), id("futex"), id("futex")];
        assert_eq!(
            dominant_subsystem(&by(&tied), Some(&top)),
            Subsystem::NetworkIo
        );
        assert!(SyscallId::from_name("read").fd_generic());
        assert!(!SyscallId::from_name("pread64").fd_generic());
        assert!(!SyscallId::from_name("recvfrom").fd_generic());
    }

    #[test]
    fn threads_waiting_on_a_peer_vote_locking_whatever_they_wait_in() {
        let id = |name| SyscallId::from_name(name).0;
        // PostgreSQL's lock waiters in `epoll_wait` (network by name), beside one
        // backend whose `recvfrom` slowed.
        let mut votes = vec![Vote::WaitsOnPeer; 3];
        votes.push(Vote::Channel(id("epoll_wait")));
        votes.push(Vote::Channel(id("recvfrom")));
        assert_eq!(dominant_subsystem(&votes, None), Subsystem::Locking);
        // They name no I/O: a descriptor call beside them keeps its class by name.
        let votes = [
            Vote::WaitsOnPeer,
            Vote::Channel(id("read")),
            Vote::Channel(id("read")),
        ];
        assert_eq!(dominant_subsystem(&votes, None), Subsystem::DiskIo);
    }
}
