//! Restores time order across the batches of one target from sources that do not keep it.
//!
//! The engine analyses each target's records in time order: a batch is sorted on arrival,
//! but batches are taken as they come. A perf or LTTng capture is one stream, merged in
//! time order by its tool. OTLP is not: every process of a service exports through its own
//! SDK, which sends when its own batch fills or its timer fires, and a busy process's
//! queue falls behind a quiet one's, so one process's records of a second reach faultline
//! after another's of the next. Measured on a real recording (Apache, fault-free, several
//! processes, each replayed by its own Python SDK provider): external τ 1.0 and 0.8,
//! internal τ 0.47, and external with a fixed wait of 3 or 10 s of event time; `none`
//! offline, live, through one provider, and with this stage.
//!
//! So a target's OTLP records wait for a watermark: the oldest "newest record" among the
//! processes (pid and host) that sent in the last [`ACTIVE_WALL`], each less the disorder
//! its own batches showed (an SDK sends its log records in order; spans carry their start
//! but leave when they end). A single-process target waits for nothing; a process that
//! stops sending stops holding the others back after [`ACTIVE_WALL`]; none is waited for
//! longer than `max_lag` of event time behind the target's newest active process.
//! Records more than the engine's clock bound from the target's newest go on at once
//! for the engine's screen to judge, moving nothing here (`Held::screen`).
//!
//! Memory: at most [`MAX_HELD_EVENTS`] records wait, over all targets; past that the
//! older half of the target holding most is fed (in order, counted), so a flood costs
//! order, never memory. At most [`MAX_PROCESSES`] processes are tracked per target; a
//! target's entry stays while faultline runs (targets are bounded by the router).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use faultline_engine::clock_screen::{JUMP_CONFIRM_EVENTS, MAX_CLOCK_JUMP_NS};
use faultline_engine::{EventKind, SyscallEvent};

use crate::sources::MAX_BATCH_EVENTS;

/// Records held at most, over all targets (at ~88 bytes each, about 22 MiB).
pub const MAX_HELD_EVENTS: usize = 262_144;

/// A process that sent nothing for this long (wall clock) no longer holds its target's
/// records back: it exited, or has nothing to send. SDKs export log records every second
/// and spans every 5 s by default while they have some; a retry backs off 1, 2, 4 s.
pub const ACTIVE_WALL: Duration = Duration::from_secs(10);

/// Processes tracked per target; past that the one that sent least recently is forgotten.
pub const MAX_PROCESSES: usize = 256;

/// Records let go, in engine-sized batches, with the source label to count them under.
pub type Released = (&'static str, Vec<Vec<SyscallEvent>>);

/// The records of one target waiting for their turn: sorted runs (one per batch), so a
/// release merges the runs' heads instead of re-sorting everything held.
#[derive(Debug, Default)]
struct Held {
    runs: Vec<Vec<SyscallEvent>>,
    len: usize,
    newest_ns: u64,
    /// The source of the latest batch (the label of what the records' feeding counts).
    source: &'static str,
    /// Per process (a hash of its pid and host; senders without a pid share one): what
    /// it sent last.
    processes: HashMap<u64, Sender>,
    /// Records released older than one already fed, so far (entries are never removed,
    /// so [`Reorder::late`] sums every target's).
    late: u64,
    /// The newest record fed so far: a record released older than it came too late to be
    /// put in order.
    fed_ns: u64,
    /// Records in a row more than the engine's clock bound from `newest_ns`, with none
    /// near it in between (see [`Reorder::push`]).
    far_run: u64,
}

/// What one process of a target sent last.
#[derive(Clone, Copy, Debug)]
struct Sender {
    newest_ns: u64,
    seen: Instant,
    /// How far back a batch of this process reached behind its newest record before it,
    /// decaying: spans arrive when they end but carry their start, and a Collector's
    /// concurrent consumers reorder one process's requests.
    disorder_ns: u64,
}

impl Sender {
    fn active(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.seen) < ACTIVE_WALL
    }
}

impl Held {
    /// The time up to which no active process will send anything more: the oldest of
    /// their newest records, each less the disorder it showed, and at most `max_lag_ns`
    /// behind the newest active process.
    fn watermark(&self, now: Instant, max_lag_ns: u64) -> u64 {
        let active = || self.processes.values().filter(|p| p.active(now));
        let newest = active()
            .map(|p| p.newest_ns)
            .max()
            .unwrap_or(self.newest_ns);
        let slowest = active()
            .map(|p| p.newest_ns.saturating_sub(p.disorder_ns))
            .min()
            .unwrap_or(newest);
        slowest.max(newest.saturating_sub(max_lag_ns))
    }

    fn saw(&mut self, key: u64, oldest_ns: u64, newest_ns: u64, now: Instant, max_lag_ns: u64) {
        if !self.processes.contains_key(&key) && self.processes.len() >= MAX_PROCESSES {
            // The one that sent least recently: an inactive one when there is any.
            let stalest = self
                .processes
                .iter()
                .min_by_key(|(_, p)| p.seen)
                .map(|(k, _)| *k);
            if let Some(k) = stalest {
                self.processes.remove(&k);
            }
        }
        // A new process has sent nothing before this batch: no disorder to measure yet.
        let p = self.processes.entry(key).or_insert(Sender {
            newest_ns: 0,
            seen: now,
            disorder_ns: 0,
        });
        if p.active(now) {
            let back = p.newest_ns.saturating_sub(oldest_ns).min(max_lag_ns);
            p.disorder_ns = back.max(p.disorder_ns - p.disorder_ns / 16);
            p.newest_ns = p.newest_ns.max(newest_ns);
        } else {
            // Back after a pause (or a sender whose clock restarted): what it sent before
            // says nothing about now.
            p.newest_ns = newest_ns;
            p.disorder_ns = 0;
        }
        p.seen = now;
    }
}

/// What [`Held::screen`] found beyond the clock bound.
enum Far {
    /// Nothing: the batch is all near the target's newest record.
    None,
    /// These records (taken out of the batch) are far off: they go to the engine at once,
    /// which counts them as clock outliers, and move nothing here.
    Passed(Vec<SyscallEvent>),
    /// Enough far records in a row that the clock itself jumped.
    Jumped,
}

impl Held {
    /// Takes out of a time-ordered batch the records more than the engine's clock bound
    /// ([`MAX_CLOCK_JUMP_NS`]) from the target's newest record. Unscreened, one record
    /// stamped days ahead (a garbage time, a host clock far off) would become the newest:
    /// the watermark would follow it, every other record would go at once unordered, and
    /// every later one would count as late for as long as faultline runs. As in the
    /// engine's screen, [`JUMP_CONFIRM_EVENTS`] such records in a row with none near
    /// say the senders' clock really moved.
    fn screen(&mut self, events: &mut Vec<SyscallEvent>) -> Far {
        if self.newest_ns == 0 {
            return Far::None;
        }
        let lo_ns = self.newest_ns.saturating_sub(MAX_CLOCK_JUMP_NS);
        let hi_ns = self.newest_ns.saturating_add(MAX_CLOCK_JUMP_NS);
        let lo = events.partition_point(|e| e.ts_ns < lo_ns);
        let hi = events.partition_point(|e| e.ts_ns <= hi_ns).max(lo);
        if lo == 0 && hi == events.len() {
            self.far_run = 0;
            return Far::None;
        }
        if hi > lo {
            self.far_run = 0;
        } else {
            self.far_run = self.far_run.saturating_add(events.len() as u64);
            if self.far_run >= JUMP_CONFIRM_EVENTS {
                return Far::Jumped;
            }
        }
        let mut far = events.split_off(hi);
        far.splice(0..0, events.drain(..lo));
        Far::Passed(far)
    }

    /// Forgets the old time after a confirmed jump of the senders' clock (nothing held).
    fn restart_clock(&mut self) {
        self.newest_ns = 0;
        self.fed_ns = 0;
        self.far_run = 0;
        self.processes.clear();
    }

    /// Removes and returns, in time order, every record at or before `cutoff_ns`
    /// (everything with `None`).
    fn take_until(&mut self, cutoff_ns: Option<u64>) -> Vec<SyscallEvent> {
        let mut out = Vec::new();
        for run in &mut self.runs {
            let n = match cutoff_ns {
                Some(c) => run.partition_point(|e| e.ts_ns <= c),
                None => run.len(),
            };
            out.extend(run.drain(..n));
            if run.len() < run.capacity() / 4 {
                run.shrink_to_fit();
            }
        }
        self.runs.retain(|r| !r.is_empty());
        self.len -= out.len();
        // Stable: records of one time keep their batch's order (an enter before its exit).
        out.sort_by_key(|e| e.ts_ns);
        self.late += out.partition_point(|e| e.ts_ns < self.fed_ns) as u64;
        self.fed_ns = self.fed_ns.max(out.last().map_or(0, |e| e.ts_ns));
        out
    }
}

/// The reorder stage: records of sources that interleave wait until every active
/// process of their target has sent past them (at most `max_lag_ns` of event time),
/// then go to the engine in time order.
#[derive(Debug, Default)]
pub struct Reorder {
    max_lag_ns: u64,
    held: HashMap<Arc<str>, Held>,
    total: usize,
    /// Times the cap released a target early (its order may then be off).
    pub overflows: u64,
    /// Late records of targets forgotten since (so [`Reorder::late`] never goes down).
    late_forgotten: u64,
}

impl Reorder {
    /// A stage holding records at most `max_lag_seconds` of event time; 0 passes
    /// everything through.
    pub fn new(max_lag_seconds: f64) -> Self {
        Self {
            max_lag_ns: (max_lag_seconds.max(0.0) * 1e9) as u64,
            ..Self::default()
        }
    }

    /// Whether batches of `source` wait here: the OTLP receivers', whose senders export
    /// each process on its own schedule.
    pub fn applies(&self, source: &str) -> bool {
        self.max_lag_ns > 0
            && (source == crate::sources::otlp::GRPC_SOURCE
                || source == crate::sources::otlp::HTTP_SOURCE)
    }

    #[cfg(test)]
    fn processes_of(&self, target: &str) -> Vec<(u64, u64)> {
        self.held
            .get(target)
            .map(|h| {
                h.processes
                    .values()
                    .map(|p| (p.newest_ns, p.disorder_ns))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Records waiting now, over all targets.
    pub fn held(&self) -> usize {
        self.total
    }

    /// Records released so far that were older than one already fed: they came later
    /// than the wait allows (a process lagging more than `max_lag`, a process's first
    /// batch, the cap, a trigger whose wait ran out).
    pub fn late(&self) -> u64 {
        self.late_forgotten + self.held.values().map(|h| h.late).sum::<u64>()
    }

    /// Forgets `target` (evicted by the router; [`Reorder::flush`] it first): with targets
    /// evicted and new ones discovered over time, entries kept for good would grow without
    /// bound. Returns the records it still held, which are dropped (none after a flush).
    pub fn forget(&mut self, target: &str) -> usize {
        let Some(h) = self.held.remove(target) else {
            return 0;
        };
        self.total -= h.len;
        self.late_forgotten += h.late;
        h.len
    }

    /// Takes a batch of process `process` (see [`process_key`]) of `target`, arrived at
    /// `now`, and returns what is now due, per target, in time order, cut into
    /// engine-sized batches: the pushed target's, and when the cap is reached the oldest
    /// records of the target holding most. TCP segment readings pass at once: they move
    /// no clock and the engine files them by their own time.
    pub fn push(
        &mut self,
        target: &Arc<str>,
        source: &'static str,
        process: u64,
        mut events: Vec<SyscallEvent>,
        now: Instant,
    ) -> Vec<(Arc<str>, Released)> {
        if events.iter().all(|e| e.kind == EventKind::TcpSegments) {
            return vec![(target.clone(), (source, chunks(events)))];
        }
        events.sort_by_key(|e| e.ts_ns);
        let max_lag_ns = self.max_lag_ns;
        let h = self.held.entry(target.clone()).or_default();
        h.source = source;
        let mut released = Vec::new();
        match h.screen(&mut events) {
            Far::None => {}
            Far::Passed(far) => released.push((target.clone(), (source, chunks(far)))),
            Far::Jumped => {
                // The senders' clock itself moved: what waits belongs to the old time,
                // and the new time starts afresh (as the engine's screen restarts).
                let old = h.take_until(None);
                self.total -= old.len();
                released.push((target.clone(), (source, chunks(old))));
                h.restart_clock();
            }
        }
        if events.is_empty() {
            released.retain(|(_, (_, c))| !c.is_empty());
            return released;
        }
        let oldest = events.first().map_or(0, |e| e.ts_ns);
        let newest = events.last().map_or(0, |e| e.ts_ns);
        h.newest_ns = h.newest_ns.max(newest);
        h.saw(process, oldest, newest, now, max_lag_ns);
        h.len += events.len();
        self.total += events.len();
        h.runs.push(events);
        let out = h.take_until(Some(h.watermark(now, max_lag_ns)));
        self.total -= out.len();
        released.push((target.clone(), (source, chunks(out))));
        while self.total > MAX_HELD_EVENTS - MAX_BATCH_EVENTS {
            self.overflows += 1;
            released.push(self.release_oldest_of_largest());
        }
        released.retain(|(_, (_, c))| !c.is_empty());
        released
    }

    /// Over the cap: the older half of what the target holding most holds, in time order
    /// (the newest records keep waiting, so later ones of a lagging process still fit).
    fn release_oldest_of_largest(&mut self) -> (Arc<str>, Released) {
        let Some((target, h)) = self.held.iter_mut().max_by_key(|(_, h)| h.len) else {
            return (Arc::from(""), ("", Vec::new()));
        };
        let mut times: Vec<u64> = h.runs.iter().flatten().map(|e| e.ts_ns).collect();
        let half = times.len() / 2;
        let cut = if times.is_empty() {
            None
        } else {
            Some(*times.select_nth_unstable(half).1)
        };
        let out = h.take_until(cut);
        self.total -= out.len();
        (target.clone(), (h.source, chunks(out)))
    }

    /// What became due because processes went quiet (no batch needed): called between
    /// batches, so a process that stopped sending stops holding the others back.
    pub fn release_quiet(&mut self, now: Instant) -> Vec<(Arc<str>, Released)> {
        let max_lag_ns = self.max_lag_ns;
        let mut out = Vec::new();
        for (target, h) in &mut self.held {
            if h.len == 0 {
                continue;
            }
            let due = h.take_until(Some(h.watermark(now, max_lag_ns)));
            if !due.is_empty() {
                self.total -= due.len();
                out.push((target.clone(), (h.source, chunks(due))));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Everything `target` holds, in time order, with the source that sent it last
    /// (before an on-demand diagnosis, or when another source's batch of it comes).
    pub fn flush(&mut self, target: &str) -> Released {
        let Some(h) = self.held.get_mut(target) else {
            return ("", Vec::new());
        };
        let out = h.take_until(None);
        self.total -= out.len();
        (h.source, chunks(out))
    }

    /// What `target` holds up to `until_ns`, in time order (for an on-demand diagnosis
    /// at `until_ns` whose wait ran out).
    pub fn flush_until(&mut self, target: &str, until_ns: u64) -> Released {
        let Some(h) = self.held.get_mut(target) else {
            return ("", Vec::new());
        };
        let out = h.take_until(Some(until_ns));
        self.total -= out.len();
        (h.source, chunks(out))
    }

    /// Everything held, per target (when the sources go quiet, and at shutdown).
    pub fn flush_all(&mut self) -> Vec<(Arc<str>, Released)> {
        let mut targets: Vec<Arc<str>> = self
            .held
            .iter()
            .filter(|(_, h)| h.len > 0)
            .map(|(t, _)| t.clone())
            .collect();
        targets.sort();
        targets
            .into_iter()
            .map(|t| {
                let out = self.flush(&t);
                (t, out)
            })
            .collect()
    }
}

/// The key a batch's process is told apart by: its pid and host (replicas in containers
/// are all pid 1 on their own hosts), its executable and service when it has no pid.
pub fn process_key(p: &crate::model::ProcessInfo) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (p.pid, &p.host, &p.comm, &p.service_name).hash(&mut h);
    h.finish()
}

fn chunks(mut events: Vec<SyscallEvent>) -> Vec<Vec<SyscallEvent>> {
    if events.len() <= MAX_BATCH_EVENTS {
        return if events.is_empty() {
            Vec::new()
        } else {
            vec![events]
        };
    }
    let mut out = Vec::with_capacity(events.len().div_ceil(MAX_BATCH_EVENTS));
    while !events.is_empty() {
        let rest = events.split_off(events.len().min(MAX_BATCH_EVENTS));
        out.push(std::mem::replace(&mut events, rest));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use faultline_engine::SyscallId;

    const S: u64 = 1_000_000_000;

    fn ev(pid: u32, ts: u64) -> SyscallEvent {
        SyscallEvent::complete(pid, pid, SyscallId::from_name("read"), ts, 10)
    }

    fn times(out: &[Vec<SyscallEvent>]) -> Vec<u64> {
        out.iter().flatten().map(|e| e.ts_ns).collect()
    }

    /// A push by process `pid`, the records released (of every target) in their order.
    fn push(
        r: &mut Reorder,
        t: &Arc<str>,
        source: &'static str,
        pid: u32,
        events: Vec<SyscallEvent>,
        now: Instant,
    ) -> Vec<Vec<SyscallEvent>> {
        r.push(t, source, u64::from(pid), events, now)
            .into_iter()
            .flat_map(|(_, (_, c))| c)
            .collect()
    }

    #[test]
    fn what_waits_stays_within_the_documented_memory() {
        let bytes = MAX_HELD_EVENTS * std::mem::size_of::<SyscallEvent>();
        assert!(bytes <= 24 << 20, "{bytes} bytes held at most");
    }

    #[test]
    fn records_wait_for_the_slowest_active_process() {
        let mut r = Reorder::new(30.0);
        let t: Arc<str> = Arc::from("apache");
        let now = Instant::now();
        let secs = |pid: u32, from: u64, to: u64| -> Vec<_> {
            (from..to)
                .map(|s| ev(pid, s * S + u64::from(pid)))
                .collect()
        };
        // Both processes announce themselves with their first second.
        assert_eq!(
            times(&push(&mut r, &t, "otlp_grpc", 1, secs(1, 0, 1), now)),
            vec![1]
        );
        // Later than all process 1 sent: it waits until process 1 sent past it.
        assert!(push(&mut r, &t, "otlp_grpc", 2, secs(2, 0, 1), now).is_empty());
        // Process 1's queue runs ahead: its seconds 1-4 wait for process 2.
        assert_eq!(
            times(&push(&mut r, &t, "otlp_grpc", 1, secs(1, 1, 5), now)),
            vec![2]
        );
        assert_eq!(r.held(), 4);
        // Process 2 catches up to second 2: everything up to its newest goes, merged.
        let out = push(&mut r, &t, "otlp_grpc", 2, secs(2, 1, 3), now);
        assert_eq!(times(&out), vec![S + 1, S + 2, 2 * S + 1, 2 * S + 2]);
        // Process 2 falls quiet: past the activity window it holds nothing back.
        assert!(r.release_quiet(now + Duration::from_secs(1)).is_empty());
        let quiet = r.release_quiet(now + ACTIVE_WALL + Duration::from_secs(1));
        assert_eq!(quiet.len(), 1);
        assert_eq!(times(&quiet[0].1 .1), vec![3 * S + 1, 4 * S + 1]);
        assert_eq!(r.held(), 0);
    }

    #[test]
    fn a_single_process_waits_for_nothing_and_no_process_beyond_the_lag() {
        let mut r = Reorder::new(10.0);
        let t: Arc<str> = Arc::from("db");
        let now = Instant::now();
        let out = push(
            &mut r,
            &t,
            "otlp_http",
            7,
            vec![ev(7, S), ev(7, 2 * S)],
            now,
        );
        assert_eq!(times(&out), vec![S, 2 * S]);
        // A second process stuck at second 2 holds the first back 10 s at most (its own
        // record at 2 s goes at once: nothing older can come).
        push(&mut r, &t, "otlp_http", 8, vec![ev(8, 2 * S)], now);
        let out = push(
            &mut r,
            &t,
            "otlp_http",
            7,
            (3..30).map(|s| ev(7, s * S)).collect(),
            now,
        );
        let expected: Vec<u64> = (3..20).map(|s| s * S).collect();
        assert_eq!(times(&out), expected);
        assert_eq!(r.late(), 0);
        // Process 8 sends second 5 after second 19 was fed: too late, counted.
        let out = push(&mut r, &t, "otlp_http", 8, vec![ev(8, 5 * S)], now);
        assert_eq!(times(&out), vec![5 * S]);
        assert_eq!(r.late(), 1);
        let (_, early) = r.flush_until("db", 21 * S);
        assert_eq!(times(&early), vec![20 * S, 21 * S]);
        let (source, rest) = r.flush("db");
        assert_eq!(source, "otlp_http");
        assert_eq!(times(&rest).len(), 8);
        assert_eq!(r.held(), 0);
        assert!(r.flush("db").1.is_empty());
    }

    #[test]
    fn a_record_stamped_far_off_neither_releases_nor_delays_the_rest() {
        let mut r = Reorder::new(30.0);
        let t: Arc<str> = Arc::from("api");
        let now = Instant::now();
        // Seconds of a clock well past the screen's hour.
        let at = |s: u64| 100_000 * S + s * S;
        push(&mut r, &t, "otlp_grpc", 1, vec![ev(1, at(0))], now);
        assert!(push(&mut r, &t, "otlp_grpc", 2, vec![ev(2, at(1))], now).is_empty());
        // Process 2's garbage times (a day ahead, and the epoch) go to the engine at once
        // (its screen counts them); its near record waits, and so do process 1's.
        let out = push(
            &mut r,
            &t,
            "otlp_grpc",
            2,
            vec![ev(2, at(2)), ev(2, at(86_400)), ev(2, 3)],
            now,
        );
        let mut got = times(&out);
        got.sort_unstable();
        assert_eq!(got, vec![3, at(86_400)]);
        let out = push(
            &mut r,
            &t,
            "otlp_grpc",
            1,
            (1..10).map(|s| ev(1, at(s))).collect(),
            now,
        );
        assert_eq!(times(&out), vec![at(1), at(1), at(2), at(2)]);
        assert_eq!(r.held(), 7);
        assert_eq!(r.late(), 0);
    }

    #[test]
    fn a_jump_of_the_senders_clock_starts_the_order_afresh() {
        let mut r = Reorder::new(30.0);
        let t: Arc<str> = Arc::from("api");
        let now = Instant::now();
        let later = 10 * 86_400 * S;
        push(&mut r, &t, "otlp_http", 1, vec![ev(1, 5 * S)], now);
        assert!(push(&mut r, &t, "otlp_http", 2, vec![ev(2, 6 * S)], now).is_empty());
        // A run of records far ahead, none near: passed on until it confirms a jump.
        let run = JUMP_CONFIRM_EVENTS / 2;
        let far = |pid: u32, from: u64| -> Vec<_> {
            (0..run).map(|i| ev(pid, later + (from + i) * S)).collect()
        };
        assert_eq!(push(&mut r, &t, "otlp_http", 1, far(1, 0), now).len(), 1);
        assert_eq!(r.held(), 1);
        // The jump: what waited (second 6) goes first, then the new time from scratch.
        let out = push(&mut r, &t, "otlp_http", 2, far(2, run), now);
        let got = times(&out);
        assert_eq!(got.first(), Some(&(6 * S)));
        assert_eq!(got.len() as u64, 1 + run);
        // Afterwards the new time is ordered as before, and nothing counted late.
        assert!(push(
            &mut r,
            &t,
            "otlp_http",
            1,
            vec![ev(1, later + 200 * S)],
            now
        )
        .is_empty());
        assert_eq!(r.held(), 1);
        assert_eq!(r.late(), 0);
    }

    #[test]
    fn a_forgotten_target_leaves_no_entry_and_its_late_records_stay_counted() {
        let mut r = Reorder::new(10.0);
        let t: Arc<str> = Arc::from("curl");
        let now = Instant::now();
        push(&mut r, &t, "otlp_http", 1, vec![ev(1, 5 * S)], now);
        push(&mut r, &t, "otlp_http", 2, vec![ev(2, 6 * S)], now);
        push(&mut r, &t, "otlp_http", 1, vec![ev(1, 9 * S)], now);
        // Process 2 sends 4 s after 6 s was fed: late, counted.
        push(
            &mut r,
            &t,
            "otlp_http",
            2,
            vec![ev(2, 7 * S), ev(2, 4 * S)],
            now,
        );
        assert_eq!(r.late(), 1);
        assert_eq!(times(&r.flush("curl").1), vec![7 * S, 9 * S]);
        assert_eq!(r.forget("curl"), 0);
        assert!(r.processes_of("curl").is_empty() && r.held.is_empty());
        assert_eq!((r.held(), r.late()), (0, 1));
        // Unflushed records are reported back when forgotten.
        push(&mut r, &t, "otlp_http", 1, vec![ev(1, 20 * S)], now);
        push(&mut r, &t, "otlp_http", 2, vec![ev(2, 30 * S)], now);
        assert_eq!(r.forget("curl"), 1);
        assert_eq!(r.held(), 0);
    }

    #[test]
    fn only_otlp_waits_and_segment_readings_pass() {
        let mut r = Reorder::new(3.0);
        assert!(r.applies("otlp_grpc") && r.applies("otlp_http"));
        assert!(!r.applies("perf") && !r.applies("lttng") && !r.applies("tcp_segments"));
        assert!(!Reorder::new(0.0).applies("otlp_grpc"));
        let t: Arc<str> = Arc::from("nginx");
        let seg = vec![SyscallEvent::tcp_segments(1, 9 * S, 100, 2)];
        assert_eq!(
            times(&push(&mut r, &t, "otlp_http", 1, seg, Instant::now())),
            vec![9 * S]
        );
        assert_eq!(r.held(), 0);
    }

    #[test]
    fn a_batch_out_of_order_within_itself_is_sorted_and_same_times_keep_their_order() {
        let mut r = Reorder::new(1.0);
        let t: Arc<str> = Arc::from("db");
        let enter = SyscallEvent::enter(1, 7, SyscallId::from_name("read"), 5 * S);
        let exit = SyscallEvent::exit(1, 7, SyscallId::from_name("read"), 5 * S, Some(0));
        let batch = vec![ev(1, 9 * S), enter, exit, ev(1, 2 * S)];
        let out = push(&mut r, &t, "otlp_http", 1, batch, Instant::now());
        assert_eq!(times(&out), vec![2 * S, 5 * S, 5 * S, 9 * S]);
        let kinds: Vec<_> = out.iter().flatten().map(|e| e.kind).collect();
        assert_eq!(kinds[1..3], [EventKind::Enter, EventKind::Exit]);
    }

    #[test]
    fn the_cap_bounds_what_waits_and_releases_the_oldest_in_order() {
        let mut r = Reorder::new(300.0);
        let t: Arc<str> = Arc::from("big");
        let u: Arc<str> = Arc::from("small");
        let now = Instant::now();
        // "small": its second process's record waits for the first, stuck at 0.
        push(&mut r, &u, "otlp_http", 8, vec![ev(8, 0)], now);
        assert!(push(&mut r, &u, "otlp_http", 9, vec![ev(9, S)], now).is_empty());
        // "big": a process stuck at 0 keeps everything of the other waiting but for the cap.
        let mut released = times(&push(&mut r, &t, "otlp_http", 2, vec![ev(2, 0)], now));
        let batches = (MAX_HELD_EVENTS / MAX_BATCH_EVENTS + 8) as u64;
        for b in 0..batches {
            let batch: Vec<_> = (0..MAX_BATCH_EVENTS as u64)
                .map(|i| ev(1, 1 + b * MAX_BATCH_EVENTS as u64 + i))
                .collect();
            let out = push(&mut r, &t, "otlp_http", 1, batch, now);
            assert!(out.iter().all(|c| c.len() <= MAX_BATCH_EVENTS));
            released.extend(times(&out));
            assert!(r.held() <= MAX_HELD_EVENTS, "{} held", r.held());
        }
        assert!(r.overflows >= 1);
        // The oldest went first, in order, and nothing was lost or fed twice.
        assert!(released.windows(2).all(|w| w[0] < w[1]));
        let rest = r.flush_all();
        let of = |name: &str| {
            rest.iter()
                .find(|(t, _)| &**t == name)
                .map(|(_, (_, o))| times(o))
                .unwrap_or_default()
        };
        assert_eq!(of("small"), vec![S], "the other target keeps its records");
        let big = of("big");
        assert!(big.first().is_some_and(|&f| Some(&f) > released.last()));
        assert_eq!(
            released.len() + big.len(),
            1 + batches as usize * MAX_BATCH_EVENTS
        );
        assert_eq!(r.held(), 0);
    }

    #[test]
    fn a_process_that_sent_out_of_order_is_waited_for_by_its_disorder() {
        let mut r = Reorder::new(30.0);
        let t: Arc<str> = Arc::from("web");
        let now = Instant::now();
        assert_eq!(
            times(&push(&mut r, &t, "otlp_grpc", 1, vec![ev(1, 10 * S)], now)),
            vec![10 * S]
        );
        // Process 1's next batch reaches 4 s behind its newest (a long span ends late).
        push(
            &mut r,
            &t,
            "otlp_grpc",
            1,
            vec![ev(1, 6 * S), ev(1, 12 * S)],
            now,
        );
        // Its next records wait about as long behind its newest.
        let out = push(&mut r, &t, "otlp_grpc", 1, vec![ev(1, 20 * S)], now);
        assert!(
            times(&out).iter().all(|&x| x <= 16 * S + S / 2),
            "{:?}",
            times(&out)
        );
        assert!(r.held() >= 1);
        // Back after a pause, a process starts afresh (a restarted sender's clock).
        let later = now + ACTIVE_WALL + Duration::from_secs(1);
        push(&mut r, &t, "otlp_grpc", 1, vec![ev(1, 2 * S)], later);
        assert_eq!(r.processes_of("web"), vec![(2 * S, 0)]);
    }

    #[test]
    fn processes_are_told_apart_by_pid_and_host() {
        let p = |pid: Option<u32>, host: &str| crate::model::ProcessInfo {
            pid,
            host: Some(host.into()),
            ..crate::model::ProcessInfo::default()
        };
        assert_eq!(process_key(&p(Some(1), "a")), process_key(&p(Some(1), "a")));
        assert_ne!(process_key(&p(Some(1), "a")), process_key(&p(Some(1), "b")));
        assert_ne!(process_key(&p(Some(1), "a")), process_key(&p(Some(2), "a")));
    }
}
