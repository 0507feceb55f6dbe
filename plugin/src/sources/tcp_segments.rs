//! [`TcpSegmentsReader`]: samples the TCP counters of the traced processes' network
//! namespaces once a second, as [`SyscallEvent::tcp_segments`] records.
//!
//! Packet loss on a service's path shows as retransmissions even when none of its calls
//! slows: a non-blocking server's sends return at once and the kernel retransmits behind
//! them (nginx's `writev`, `sendfile`). The kernel counts per network namespace, in
//! `/proc/<pid>/net/snmp`: the `Tcp:` header line names the fields, the next `Tcp:` line
//! holds their values; `OutSegs` (segments sent, not counting retransmissions) and
//! `RetransSegs` (segments sent again) are read, and each record carries their growth
//! since the namespace's previous reading. The first reading of a namespace is its
//! baseline and yields nothing; a counter that went down (it never should) counts 0.
//!
//! Which processes: the live perf source's — its `pids`, or the processes listed in the
//! cgroup's `cgroup.procs` (re-read every round, at most [`MAX_PIDS`]). `command` mode has
//! no pid known up front and is not sampled. Processes are grouped by their network
//! namespace (the inode of `/proc/<pid>/ns/net`; when that link cannot be read, without
//! ptrace access to the process, the namespace of a process of the same name read earlier
//! in the round, else by process name, so a hundred backends still make one reading, not a
//! hundred copies that would multiply the counts), so a namespace is read once a round; the reading then goes to each distinct
//! process name in the namespace, as a batch of the first process listed with that name
//! (its pid and name, as the perf source's batches of it carry, so the router gives it to
//! the same target). One record per name rather than per process: nginx's master and
//! workers share a namespace and a name, hence a target, and one record per process would
//! count the namespace's segments once per worker. Records of one reading share their
//! time stamp and counts, so a target whose configured names span two processes of one
//! namespace (`process_names = ["php-fpm", "php-fpm8.2"]`) gets the same reading twice
//! with the same `ts_ns`, which the engine takes once.
//!
//! A pid listed in `pids` is sampled only while it is the process first seen under it
//! (its start time in `/proc/<pid>/stat`): a pid the kernel reused for another process
//! would lend it the target's name.
//!
//! Time stamps are `CLOCK_MONOTONIC` nanoseconds taken right after the reading, the clock
//! the live perf source records with (`perf record -k CLOCK_MONOTONIC`).
//!
//! A process that vanished is skipped for that round (logged once at debug level, counted
//! nowhere); a namespace nobody lists any more is forgotten. A `snmp` file without the two
//! fields counts as a decode error.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{self, BufRead};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use faultline_engine::SyscallEvent;

use crate::model::{EventBatch, ProcessInfo};
use crate::pipeline::telemetry::SourceStats;
use crate::sources::perf::live::PerfTarget;
use crate::sources::{BatchReader, SourceError};

/// Source name in metric labels and batches.
pub const SOURCE: &str = "tcp_segments";

/// How often the counters are read.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// Longest sleep between two looks at the stop flag.
const STOP_CHECK: Duration = Duration::from_millis(100);

/// Processes looked at per round at most (a cgroup's first ones); also bounds the
/// namespaces remembered and the batches a round yields.
pub const MAX_PIDS: usize = 4096;

/// Where a cgroup's `cgroup.procs` may be: the v2 hierarchy mounted at `/sys/fs/cgroup`,
/// or, on a hybrid v1/v2 system, at `unified`, or the v1 `perf_event` controller's (the
/// hierarchy `perf -G` names cgroups in there).
const CGROUP_ROOTS: [&str; 3] = [
    "/sys/fs/cgroup",
    "/sys/fs/cgroup/unified",
    "/sys/fs/cgroup/perf_event",
];

/// The two counters of a namespace's `Tcp:` line that are read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpCounters {
    /// `OutSegs`: segments sent, excluding retransmissions.
    pub out_segs: u64,
    /// `RetransSegs`: segments retransmitted.
    pub retrans_segs: u64,
}

impl TcpCounters {
    /// (sent, retransmitted) since `earlier`; a counter that went down counts 0.
    fn since(self, earlier: TcpCounters) -> (u64, u64) {
        (
            self.out_segs.saturating_sub(earlier.out_segs),
            self.retrans_segs.saturating_sub(earlier.retrans_segs),
        )
    }
}

/// The TCP counters of a `/proc/<pid>/net/snmp` text: the first `Tcp:` line names the
/// fields, the second holds their values. `None` without both lines or without a
/// non-negative `OutSegs` and `RetransSegs`.
pub fn parse_snmp(text: &str) -> Option<TcpCounters> {
    let mut tcp = text.lines().filter_map(|l| l.strip_prefix("Tcp:"));
    let (names, values) = (tcp.next()?, tcp.next()?);
    let (mut out_segs, mut retrans_segs) = (None, None);
    for (name, value) in names.split_whitespace().zip(values.split_whitespace()) {
        match name {
            "OutSegs" => out_segs = value.parse().ok(),
            "RetransSegs" => retrans_segs = value.parse().ok(),
            _ => {}
        }
    }
    Some(TcpCounters {
        out_segs: out_segs?,
        retrans_segs: retrans_segs?,
    })
}

/// `CLOCK_MONOTONIC` now, in nanoseconds.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: the out-pointer is valid for the call; CLOCK_MONOTONIC always exists.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
        return 0;
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// Which processes are sampled.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Watched {
    Pids(Vec<u32>),
    /// A cgroup's path relative to the hierarchy's root.
    Cgroup(String),
}

/// What identifies a network namespace: the device and inode of `/proc/<pid>/ns/net`,
/// or, when that cannot be read (no ptrace access to the process), the process's name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum NetKey {
    Ns { dev: u64, ino: u64 },
    Name(String),
}

/// A process of a round: its pid and name.
struct Proc {
    pid: u32,
    comm: String,
}

/// The processes of one namespace in a round, in the order listed.
struct Namespace {
    key: NetKey,
    procs: Vec<Proc>,
}

/// Samples the TCP counters of the traced processes' network namespaces (see the module
/// documentation). A pull source without producers: [`BatchReader::next_batch`] sleeps
/// until the next round in steps of 100 ms, and ends (`Ok(None)`) once `stop` is set.
pub struct TcpSegmentsReader {
    watched: Watched,
    interval: Duration,
    stop: Arc<AtomicBool>,
    stats: Arc<SourceStats>,
    /// Each namespace's latest reading (only those seen in the latest round).
    previous: HashMap<NetKey, TcpCounters>,
    ready: VecDeque<EventBatch>,
    next_round: Option<Instant>,
    /// Pids whose disappearance was logged (bounded by [`MAX_PIDS`]).
    logged_gone: HashSet<u32>,
    /// The kinds of failure already warned about (no cgroup, a refused file, a file
    /// without the counters): each is warned about once.
    warned: HashSet<&'static str>,
    /// The start time of each listed pid's process when first seen (`pids` mode).
    starts: HashMap<u32, u64>,
}

impl TcpSegmentsReader {
    /// A sampler of the processes `target` names, `None` for a target without a pid or
    /// cgroup up front (`command`, system-wide).
    pub fn for_target(
        target: &PerfTarget,
        stats: Arc<SourceStats>,
        stop: Arc<AtomicBool>,
    ) -> Option<Self> {
        let watched = match target {
            PerfTarget::Pids(pids) if !pids.is_empty() => Watched::Pids(pids.clone()),
            PerfTarget::Cgroup(cg) => Watched::Cgroup(cg.clone()),
            PerfTarget::Pids(_) | PerfTarget::Command(_) | PerfTarget::SystemWide => return None,
        };
        Some(Self {
            watched,
            interval: INTERVAL,
            stop,
            stats,
            previous: HashMap::new(),
            ready: VecDeque::new(),
            next_round: None,
            logged_gone: HashSet::new(),
            warned: HashSet::new(),
            starts: HashMap::new(),
        })
    }

    /// Reads every `interval` instead of every second.
    pub fn with_interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// The pids of this round, at most [`MAX_PIDS`].
    fn pids(&mut self) -> Vec<u32> {
        match &self.watched {
            Watched::Pids(pids) => pids.iter().copied().take(MAX_PIDS).collect(),
            Watched::Cgroup(cg) => {
                let cg = cg.trim_matches('/').to_owned();
                let read = CGROUP_ROOTS.iter().find_map(|root| {
                    let path = Path::new(root).join(&cg).join("cgroup.procs");
                    cgroup_procs(&path).ok()
                });
                read.unwrap_or_else(|| {
                    self.warn_once(
                        "cgroup",
                        format_args!("no cgroup.procs of cgroup {cg:?} under {CGROUP_ROOTS:?}"),
                    );
                    Vec::new()
                })
            }
        }
    }

    /// This round's processes grouped by network namespace (first seen first); vanished
    /// ones left out.
    fn namespaces(&mut self) -> Vec<Namespace> {
        let mut out: Vec<Namespace> = Vec::new();
        let mut index: HashMap<NetKey, usize> = HashMap::new();
        for pid in self.pids() {
            let dir = PathBuf::from(format!("/proc/{pid}"));
            if !self.same_process(pid) {
                continue;
            }
            let comm = match std::fs::read_to_string(dir.join("comm")) {
                Ok(c) => c.trim_end_matches('\n').to_owned(),
                Err(e) => {
                    self.gone(pid, &e);
                    continue;
                }
            };
            let key = match std::fs::metadata(dir.join("ns/net")) {
                Ok(m) => NetKey::Ns {
                    dev: m.dev(),
                    ino: m.ino(),
                },
                Err(e) if is_gone(&e) => {
                    self.gone(pid, &e);
                    continue;
                }
                // A process of a name already read in a known namespace joins it: read
                // apart, the namespace would count twice a round.
                Err(_) => out
                    .iter()
                    .find(|ns| ns.procs.iter().any(|p| p.comm == comm))
                    .map_or_else(|| NetKey::Name(comm.clone()), |ns| ns.key.clone()),
            };
            let proc = Proc { pid, comm };
            match index.get(&key).and_then(|&i| out.get_mut(i)) {
                Some(ns) => ns.procs.push(proc),
                None => {
                    index.insert(key.clone(), out.len());
                    out.push(Namespace {
                        key,
                        procs: vec![proc],
                    });
                }
            }
        }
        out
    }

    /// Reads every namespace once and queues the batches of the growth since its previous
    /// reading.
    fn round(&mut self) {
        let mut seen = HashMap::new();
        for ns in self.namespaces() {
            let Some((counters, ts_ns)) = self.read(&ns) else {
                continue;
            };
            seen.insert(ns.key.clone(), counters);
            let Some(earlier) = self.previous.get(&ns.key) else {
                continue;
            };
            let (sent, retransmitted) = counters.since(*earlier);
            let mut names = HashSet::new();
            for p in ns.procs {
                if !names.insert(p.comm.clone()) {
                    continue;
                }
                self.ready.push_back(EventBatch {
                    source: SOURCE,
                    process: ProcessInfo {
                        pid: Some(p.pid),
                        comm: Some(p.comm),
                        ..ProcessInfo::default()
                    },
                    events: vec![SyscallEvent::tcp_segments(
                        p.pid,
                        ts_ns,
                        sent,
                        retransmitted,
                    )],
                });
            }
        }
        // Only the namespaces of this round: the map stays as small as the pid list.
        self.previous = seen;
    }

    /// A namespace's counters, from the first of its processes whose file reads, and the
    /// time of the reading.
    fn read(&mut self, ns: &Namespace) -> Option<(TcpCounters, u64)> {
        for p in &ns.procs {
            let text = match std::fs::read_to_string(format!("/proc/{}/net/snmp", p.pid)) {
                Ok(t) => t,
                Err(e) => {
                    if is_gone(&e) {
                        self.gone(p.pid, &e);
                    } else {
                        self.warn_once("read", format_args!("/proc/{}/net/snmp: {e}", p.pid));
                    }
                    continue;
                }
            };
            let ts_ns = monotonic_ns();
            return match parse_snmp(&text) {
                Some(c) => Some((c, ts_ns)),
                None => {
                    self.stats.add_decode_errors(1);
                    self.warn_once(
                        "decode",
                        format_args!(
                            "/proc/{}/net/snmp has no Tcp: OutSegs and RetransSegs",
                            p.pid
                        ),
                    );
                    None
                }
            };
        }
        None
    }

    /// Notes that process `pid` is gone (debug log, once per pid).
    fn gone(&mut self, pid: u32, e: &io::Error) {
        if self.logged_gone.len() >= MAX_PIDS {
            self.logged_gone.clear();
        }
        if self.logged_gone.insert(pid) {
            tracing::debug!(source = SOURCE, pid, error = %e, "process gone, not sampled");
        }
    }

    /// Whether listed pid `pid` is still the process first seen under it (always, for a
    /// cgroup's, which the kernel lists afresh each round). A pid whose process is gone
    /// is left to the reads, which skip it.
    fn same_process(&mut self, pid: u32) -> bool {
        if !matches!(self.watched, Watched::Pids(_)) {
            return true;
        }
        let Some(now) = crate::pipeline::silence::start_time(pid) else {
            return true;
        };
        let first = *self.starts.entry(pid).or_insert(now);
        if first == now {
            return true;
        }
        self.gone(pid, &io::Error::other("pid reused by another process"));
        false
    }

    fn warn_once(&mut self, kind: &'static str, what: std::fmt::Arguments<'_>) {
        if self.warned.insert(kind) {
            tracing::warn!(
                source = SOURCE,
                "{what}; TCP segments are not sampled where it fails (warned once)"
            );
        }
    }

    /// Sleeps until the next round is due, in steps of [`STOP_CHECK`]; false once `stop`
    /// is set.
    fn wait_for_round(&mut self) -> bool {
        let due = *self.next_round.get_or_insert_with(Instant::now);
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return false;
            }
            let now = Instant::now();
            if now >= due {
                // After a long stall (a full queue), the next round is an interval on.
                let next = due + self.interval;
                self.next_round = Some(if next <= now {
                    now + self.interval
                } else {
                    next
                });
                return true;
            }
            std::thread::sleep(STOP_CHECK.min(due - now));
        }
    }
}

impl BatchReader for TcpSegmentsReader {
    fn next_batch(&mut self) -> Result<Option<EventBatch>, SourceError> {
        loop {
            if let Some(batch) = self.ready.pop_front() {
                self.stats.add_received(batch.events.len() as u64);
                return Ok(Some(batch));
            }
            if !self.wait_for_round() {
                return Ok(None);
            }
            self.round();
        }
    }
}

/// The first [`MAX_PIDS`] pids of a `cgroup.procs` file.
fn cgroup_procs(path: &Path) -> io::Result<Vec<u32>> {
    let file = io::BufReader::new(std::fs::File::open(path)?);
    let mut pids = Vec::new();
    for line in file.lines() {
        if pids.len() >= MAX_PIDS {
            break;
        }
        if let Ok(pid) = line?.trim().parse() {
            pids.push(pid);
        }
    }
    Ok(pids)
}

/// Whether a `/proc/<pid>` read failed because the process is gone (or a zombie whose
/// namespaces are released).
fn is_gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
}

/// The tests' record of skipped checks (`$FAULTLINE_SKIP_LOG`), shared with the
/// integration tests.
#[cfg(test)]
#[path = "../../tests/prereq/mod.rs"]
#[allow(clippy::duplicate_mod)] // each module that records skips includes it
mod test_prereq;

#[cfg(test)]
mod tests {
    use super::test_prereq as prereq;
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    /// `cat /proc/self/net/snmp` on kernel 6.18.
    const SNMP: &str = "\
Ip: Forwarding DefaultTTL InReceives InHdrErrors InAddrErrors ForwDatagrams InUnknownProtos InDiscards InDelivers OutRequests OutDiscards OutNoRoutes ReasmTimeout ReasmReqds ReasmOKs ReasmFails FragOKs FragFails FragCreates OutTransmits
Ip: 1 64 3565432 0 0 0 0 0 3563960 4477263 16 0 0 0 0 0 0 0 0 4477263
Icmp: InMsgs InErrors InCsumErrors InDestUnreachs InTimeExcds InParmProbs InSrcQuenchs InRedirects InEchos InEchoReps InTimestamps InTimestampReps InAddrMasks InAddrMaskReps OutMsgs OutErrors OutRateLimitGlobal OutRateLimitHost OutDestUnreachs OutTimeExcds OutParmProbs OutSrcQuenchs OutRedirects OutEchos OutEchoReps OutTimestamps OutTimestampReps OutAddrMasks OutAddrMaskReps
Icmp: 98 0 0 98 0 0 0 0 0 0 0 0 0 0 98 0 0 0 98 0 0 0 0 0 0 0 0 0 0
IcmpMsg: InType3 OutType3
IcmpMsg: 98 98
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors
Tcp: 1 200 120000 -1 8307 4852 1249 80 0 3420326 4338156 3091 0 1227 0
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 143634 98 0 143732 0 0 0 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 0 0 0 0 0 0 0 0 0
";

    #[test]
    fn the_tcp_line_gives_outsegs_and_retranssegs() {
        assert_eq!(
            parse_snmp(SNMP),
            Some(TcpCounters {
                out_segs: 4_338_156,
                retrans_segs: 3091
            })
        );
        // Without the values line, a field, or with garbage in it: nothing.
        let header_only: String = SNMP.lines().take(7).collect::<Vec<_>>().join("\n");
        assert_eq!(parse_snmp(&header_only), None);
        assert_eq!(parse_snmp(&SNMP.replace("RetransSegs", "Retrans")), None);
        assert_eq!(parse_snmp(&SNMP.replace(" 4338156 ", " x ")), None);
        assert_eq!(parse_snmp(""), None);
    }

    #[test]
    fn a_counter_that_went_down_counts_nothing() {
        let before = TcpCounters {
            out_segs: 100,
            retrans_segs: 7,
        };
        let after = TcpCounters {
            out_segs: 130,
            retrans_segs: 2,
        };
        assert_eq!(after.since(before), (30, 0));
    }

    fn own(interval: Duration) -> (TcpSegmentsReader, Arc<SourceStats>, Arc<AtomicBool>) {
        let stats = Arc::new(SourceStats::new(SOURCE));
        let stop = Arc::new(AtomicBool::new(false));
        let target = PerfTarget::Pids(vec![std::process::id()]);
        let reader = TcpSegmentsReader::for_target(&target, stats.clone(), stop.clone())
            .unwrap()
            .with_interval(interval);
        (reader, stats, stop)
    }

    fn own_comm() -> String {
        std::fs::read_to_string("/proc/self/comm")
            .unwrap()
            .trim_end()
            .to_owned()
    }

    /// This process's real `/proc/<pid>/net/snmp`: the first round is the baseline, the
    /// second yields one record of this process, stamped with the monotonic clock.
    #[test]
    fn own_namespace_after_two_rounds() {
        let (mut r, stats, _stop) = own(Duration::from_millis(50));
        let before = monotonic_ns();
        let started = Instant::now();
        let b = r.next_batch().unwrap().expect("a batch after two rounds");
        let after = monotonic_ns();
        assert!(
            started.elapsed() >= Duration::from_millis(50),
            "a baseline first"
        );
        assert_eq!(b.source, SOURCE);
        let pid = std::process::id();
        assert_eq!(b.process.pid, Some(pid));
        assert_eq!(b.process.comm.as_deref(), Some(own_comm().as_str()));
        let [e] = b.events.as_slice() else {
            panic!("one record: {:?}", b.events)
        };
        assert_eq!(e.kind, faultline_engine::EventKind::TcpSegments);
        assert_eq!(e.pid, pid);
        assert!(
            (before..=after).contains(&e.ts_ns),
            "{before} {} {after}",
            e.ts_ns
        );
        assert!(e.segments().is_some());
        assert_eq!(stats.received(), 1);
        assert_eq!(stats.decode_errors(), 0);
    }

    /// Segments this process sends over loopback between two readings show in the record.
    #[test]
    fn loopback_traffic_counts_as_sent() {
        let (mut r, _stats, _stop) = own(Duration::from_secs(3600));
        r.round();
        assert!(r.ready.is_empty(), "the first reading is a baseline");
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        client.set_nodelay(true).unwrap();
        server.set_nodelay(true).unwrap();
        let mut buf = [0u8; 4];
        for _ in 0..20 {
            client.write_all(b"ping").unwrap();
            server.read_exact(&mut buf).unwrap();
            server.write_all(b"pong").unwrap();
            client.read_exact(&mut buf).unwrap();
        }
        r.round();
        let b = r.ready.pop_front().expect("a record of the second reading");
        let (sent, _retransmitted) = b.events[0].segments().unwrap();
        // A handshake segment each way and 20 data segments each way, at least.
        assert!(sent >= 42, "{sent}");
    }

    /// A pid that does not exist is skipped without an error; the stop flag ends the
    /// source within a step, mid-interval.
    /// A listed pid whose process is not the one first seen under it (the kernel reused
    /// the pid) is not sampled: its counts would go to the old process's target.
    #[test]
    fn a_reused_pid_is_not_sampled() {
        let (mut r, _stats, _stop) = own(Duration::from_millis(20));
        let pid = std::process::id();
        r.round();
        r.round();
        assert_eq!(r.ready.len(), 1, "the process first seen is sampled");
        r.ready.clear();
        // As if the process first seen under the pid had started at another time.
        if let Some(start) = r.starts.get_mut(&pid) {
            *start += 1;
        }
        r.round();
        r.round();
        assert!(r.ready.is_empty());
    }

    #[test]
    fn a_vanished_pid_is_skipped_and_stop_ends_the_source() {
        let stats = Arc::new(SourceStats::new(SOURCE));
        let stop = Arc::new(AtomicBool::new(false));
        // Above the kernel's pid limit (2^22): never a process.
        let target = PerfTarget::Pids(vec![u32::MAX - 1]);
        let mut r = TcpSegmentsReader::for_target(&target, stats.clone(), stop.clone())
            .unwrap()
            .with_interval(Duration::from_millis(20));
        r.round();
        r.round();
        assert!(r.ready.is_empty());
        assert!(r.previous.is_empty());
        let stopper = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(150));
                stop.store(true, Ordering::Relaxed);
            })
        };
        let started = Instant::now();
        assert!(r.next_batch().unwrap().is_none());
        assert!(started.elapsed() < Duration::from_secs(2));
        stopper.join().unwrap();
        assert_eq!(stats.decode_errors(), 0);
        assert_eq!(stats.received(), 0);
    }

    #[test]
    fn only_targets_with_pids_or_a_cgroup_are_sampled() {
        let stats = Arc::new(SourceStats::new(SOURCE));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = |t: PerfTarget| TcpSegmentsReader::for_target(&t, stats.clone(), stop.clone());
        assert!(reader(PerfTarget::Pids(vec![1])).is_some());
        assert!(reader(PerfTarget::Cgroup("system.slice".into())).is_some());
        assert!(reader(PerfTarget::Pids(vec![])).is_none());
        assert!(reader(PerfTarget::Command(vec!["ls".into()])).is_none());
        assert!(reader(PerfTarget::SystemWide).is_none());
    }

    /// The cgroup this process is in (cgroup v2 path), when this machine shows its
    /// `cgroup.procs`: each namespace's name gets one record, of a process listed there.
    #[test]
    fn own_cgroup_after_two_rounds() {
        let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let Some(cg) = cgroups.lines().find_map(|l| l.strip_prefix("0::")) else {
            prereq::skip(&format!(
                "no cgroup v2 here: /proc/self/cgroup is {cgroups:?}"
            ));
            return;
        };
        let cg = cg.trim_matches('/');
        let Some(procs) = CGROUP_ROOTS
            .iter()
            .find_map(|root| cgroup_procs(&Path::new(root).join(cg).join("cgroup.procs")).ok())
        else {
            prereq::skip(&format!(
                "no cgroup.procs of {cg:?} under any of {CGROUP_ROOTS:?}"
            ));
            return;
        };
        let stats = Arc::new(SourceStats::new(SOURCE));
        let stop = Arc::new(AtomicBool::new(false));
        let target = PerfTarget::Cgroup(format!("/{cg}"));
        let mut r = TcpSegmentsReader::for_target(&target, stats, stop)
            .unwrap()
            .with_interval(Duration::from_millis(20));
        r.round();
        r.round();
        assert!(!r.ready.is_empty(), "this process's namespace at least");
        let mut names = HashSet::new();
        for b in &r.ready {
            let pid = b.process.pid.unwrap();
            assert!(procs.contains(&pid) || Path::new(&format!("/proc/{pid}")).exists());
            let [e] = b.events.as_slice() else {
                panic!("one record: {:?}", b.events)
            };
            assert_eq!(
                (e.pid, e.kind),
                (pid, faultline_engine::EventKind::TcpSegments)
            );
            // The same name twice only from different namespaces.
            names.insert((b.process.comm.clone().unwrap(), e.ts_ns));
        }
        assert_eq!(names.len(), r.ready.len());
        assert!(r.ready.len() <= MAX_PIDS);
    }
}
