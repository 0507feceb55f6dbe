//! Keeps the engine's clock running for targets that fall silent.
//!
//! The engine analyses in event time: a target whose threads all stopped (a frozen
//! cgroup, a paused VM) or all wait in a call (a hang) sends no record, so its clock
//! stops and it is never reported on again, exactly when the on-call engineer needs
//! it. The host knows how much wall time passed since the target's latest record
//! arrived, and moves the target's clock on by that much (`EngineHost::advance`),
//! telling the engine whether the target's threads all sleep of their own accord (an
//! idle server with no periodic thread is as silent as a frozen one; see
//! [`super::process_state`]).
//!
//! Only where silence means the target made no call:
//! - records of faultline's own live captures (perf, an LTTng live session) that hand
//!   over a quiet target's records within seconds (perf only with `--control`), while
//!   that capture runs: an OTLP exporter that stopped sending looks the same as a target
//!   that stopped calling, and a recorded trace's pauses are its reader's;
//! - while a process of the target still exists (the same process: its start time is
//!   compared, so a reused pid does not count): a target that exited (crashed, or was
//!   stopped) is gone, not hung.
//!
//! The estimate never runs ahead of the source clock: the latest record was made
//! before it arrived, so `latest + elapsed since arrival` is at most the source's
//! "now". Records still in flight when the clock moves on arrive behind it and are
//! analysed as late ones; that is why the clock only moves after `after` of silence,
//! beyond a live capture's delivery delay (about 2 s). `perf script` hands over a round
//! of records only once the next one begins, so the last moments before a silence may
//! arrive only when the target calls again.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use faultline_engine::{Stillness, SyscallEvent};

use super::process_state::Probe;

/// How often the engine task asks for due advances, whatever else it is doing (a
/// busy target must not keep a silent one from being reported on).
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Processes remembered per target, most recent first: enough to tell whether any is
/// still there (a target of many short-lived processes keeps its latest ones). Only
/// these are read for [`Stillness`]: a stopped process among more that made no record
/// lately goes unseen.
const PIDS_KEPT: usize = 16;

/// How long a reading of a silent target's processes' states is reused: reading them
/// costs two small files per thread, and silences (idle nights) last.
const PROBE_EVERY: Duration = Duration::from_secs(5);

/// Threads read per second at most, on average over all silent targets (a reading's
/// [`Probe::cost`]): the reads run on the engine's thread, and cost about 25 µs a thread
/// (`stat` and `wchan` of 4,000 sleeping threads of one process: 95 ms on this project's
/// 2-core test box), so a host of many large idle targets must not spend its seconds
/// reading `/proc`. A credit of one second's budget at most; a reading starts while any
/// is left and may overdraw it (a target of [`super::process_state::MAX_TASKS`] threads
/// is read whole), the debt paid by the next seconds. Readings are taken in the order
/// they fell due; a target left over keeps its last reading until its turn, and one never
/// read waits for its first (its clock stays put rather than move under a reading nobody
/// took). So a reading is at most about 5 s plus (threads of the silent targets) / 2,048
/// seconds old: 5 s while they have under 10,000 threads in all.
pub const PROBE_BUDGET: usize = 2048;

/// A batch whose latest record is this far from the target's latest (the engine's clock
/// screen's hour) restarts the watch: a record stamped far off, or a source clock that
/// jumped, must not leave the target looking silent for good.
const MAX_JUMP_NS: u64 = 3_600_000_000_000;

/// A process of a target: its pid and start time (clock ticks after boot, `None` when
/// unreadable), so a pid the kernel reused for another process is not taken for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
    pub start: Option<u64>,
}

/// A target's latest record, when it arrived, and where from.
#[derive(Clone, Debug)]
struct Seen {
    latest_ns: u64,
    arrived: Instant,
    source: &'static str,
    processes: Vec<Process>,
    /// The latest reading of its processes' states, and when it was taken.
    probed: Option<(Instant, Stillness)>,
    /// The reading its latest advance in this silence carried (to log changes only).
    told: Option<Stillness>,
}

/// A target whose clock may move on: its name, the event time to move it to, and what
/// its processes were doing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Due {
    pub target: String,
    pub now_ns: u64,
    pub still: Stillness,
    /// The first advance of this silence, or its reading changed: worth a log line.
    pub news: bool,
}

/// What one [`SilenceWatch::due`] check found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DueCheck {
    /// The targets whose clocks may move on, sorted by name.
    pub due: Vec<Due>,
    /// Silent targets left waiting for a first reading of their threads
    /// ([`PROBE_BUDGET`] spent): their clocks do not move this check.
    pub deferred: usize,
}

/// Per-target latest record times, for the targets the engine was fed.
#[derive(Debug)]
pub struct SilenceWatch {
    after: Duration,
    /// The source labels of the live captures watched (records of others are ignored).
    sources: Vec<&'static str>,
    targets: HashMap<String, Seen>,
    /// The router's target cap: the map never holds more names than the engine does.
    max_targets: usize,
    /// Threads that may still be read ([`PROBE_BUDGET`]; negative: overdrawn), as of
    /// `credited`.
    credit: f64,
    credited: Option<Instant>,
}

impl SilenceWatch {
    /// Advances the targets of live captures `sources` silent for at least `after`
    /// (wall clock).
    pub fn new(after: Duration, sources: Vec<&'static str>, max_targets: usize) -> Self {
        Self {
            after,
            sources,
            targets: HashMap::new(),
            max_targets,
            credit: 0.0,
            credited: None,
        }
    }

    /// Whether the records of `source` are watched at all.
    pub fn watches(&self, source: &str) -> bool {
        self.sources.contains(&source)
    }

    /// Notes a batch of process `pid` fed to `target` at `now` from live capture
    /// `source`. Only a record later than the latest restarts the silence: late records
    /// (a source's reordering) do not say the target is making calls now.
    pub fn observe(
        &mut self,
        target: &str,
        source: &'static str,
        pid: Option<u32>,
        events: &[SyscallEvent],
        now: Instant,
    ) {
        if !self.watches(source) {
            return;
        }
        let Some(latest) = events.iter().map(|e| e.ts_ns).max() else {
            return;
        };
        let pid = pid.or_else(|| events.first().map(|e| e.pid));
        if !self.targets.contains_key(target) {
            if self.targets.len() >= self.max_targets {
                return;
            }
            let first = Seen {
                latest_ns: latest,
                arrived: now,
                source,
                processes: Vec::new(),
                probed: None,
                told: None,
            };
            self.targets.insert(target.to_owned(), first);
        }
        let Some(seen) = self.targets.get_mut(target) else {
            return;
        };
        if latest > seen.latest_ns || seen.latest_ns - latest > MAX_JUMP_NS {
            seen.latest_ns = latest;
            seen.arrived = now;
            seen.source = source;
            seen.probed = None;
            seen.told = None;
        }
        if let Some(pid) = pid {
            remember(&mut seen.processes, pid, start_time);
        }
    }

    /// Stops watching `target` (the router evicted it): its slot goes to a new target,
    /// and an evicted target is not reported on.
    pub fn forget(&mut self, target: &str) {
        self.targets.remove(target);
    }

    /// The targets silent for at least `after` at `now` whose capture is still
    /// `running` and of which a process still `exists`, each with the event time its
    /// clock may move to and how the pids of those processes stand (`probe`, within
    /// [`PROBE_BUDGET`]; see [`super::process_state`]), sorted by name, so runs are
    /// reproducible; and how many were left waiting for a first reading.
    pub fn due(
        &mut self,
        now: Instant,
        running: impl Fn(&'static str) -> bool,
        exists: impl Fn(Process) -> bool,
        mut probe: impl FnMut(&[u32]) -> Probe,
    ) -> DueCheck {
        // (name, its processes still there: empty when they cannot be read)
        let mut silent: Vec<(&String, &mut Seen, Vec<u32>)> = Vec::new();
        for (name, seen) in self.targets.iter_mut() {
            let Some(quiet) = now.checked_duration_since(seen.arrived) else {
                continue;
            };
            if quiet < self.after || !running(seen.source) {
                continue;
            }
            // Without a pid (a source that names none) nothing says it exited, nor
            // how it stands.
            let alive: Vec<Process> = seen
                .processes
                .iter()
                .copied()
                .filter(|&p| exists(p))
                .collect();
            if !seen.processes.is_empty() && alive.is_empty() {
                continue;
            }
            // A process whose start time was never read may be another by now.
            let readable = !alive.is_empty() && alive.iter().all(|p| p.start.is_some());
            let pids = if readable {
                alive.iter().map(|p| p.pid).collect()
            } else {
                Vec::new()
            };
            silent.push((name, seen, pids));
        }
        let stale = |seen: &Seen| {
            seen.probed
                .is_none_or(|(at, _)| now.saturating_duration_since(at) >= PROBE_EVERY)
        };
        // Readings in the order they fell due: a target never read since it fell silent
        // from when it did, a stale one from when its reading aged. Not "never read
        // first": targets that fall silent again and again would keep one whose
        // silence lasts from ever being read.
        let after = self.after;
        let order = |(name, seen, _): &(&String, &mut Seen, Vec<u32>)| {
            let since = match seen.probed {
                None => seen.arrived.checked_add(after),
                Some((at, _)) => at.checked_add(PROBE_EVERY),
            };
            (since.unwrap_or(seen.arrived), (*name).clone())
        };
        silent.sort_by_cached_key(order);
        let per_second = PROBE_BUDGET as f64;
        let secs = self
            .credited
            .map_or(1.0, |at| now.saturating_duration_since(at).as_secs_f64());
        self.credit = (self.credit + secs * per_second).min(per_second);
        self.credited = Some(self.credited.map_or(now, |at| at.max(now)));
        let mut check = DueCheck::default();
        for (name, seen, pids) in silent {
            if !pids.is_empty() && stale(seen) && self.credit > 0.0 {
                let p = probe(&pids);
                self.credit -= p.cost as f64;
                seen.probed = Some((now, p.still));
            }
            let reading = match seen.probed {
                Some((_, s)) if !pids.is_empty() => s,
                None if !pids.is_empty() => {
                    check.deferred += 1;
                    continue;
                }
                _ => Stillness::Unknown,
            };
            let news = seen.told != Some(reading);
            seen.told = Some(reading);
            let quiet = now.saturating_duration_since(seen.arrived);
            let ns = u64::try_from(quiet.as_nanos()).unwrap_or(u64::MAX);
            check.due.push(Due {
                target: name.clone(),
                now_ns: seen.latest_ns.saturating_add(ns),
                still: reading,
                news,
            });
        }
        check.due.sort_by(|a, b| a.target.cmp(&b.target));
        check
    }
}

/// Moves `pid` to the front of `processes`, keeping at most [`PIDS_KEPT`]; a pid new
/// to the list has its start time read (`start`) once.
fn remember(processes: &mut Vec<Process>, pid: u32, start: impl Fn(u32) -> Option<u64>) {
    if processes.first().is_some_and(|p| p.pid == pid) {
        return;
    }
    let known = processes.iter().position(|p| p.pid == pid);
    let p = match known {
        Some(i) => processes.remove(i),
        None => Process {
            pid,
            start: start(pid),
        },
    };
    processes.insert(0, p);
    processes.truncate(PIDS_KEPT);
}

/// The start time of process `pid` in clock ticks after boot (`/proc/<pid>/stat` field
/// 22), if it exists. Pids are those of faultline's own pid namespace: run it in the
/// host's, as perf and LTTng need anyway.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces or ')'.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether process `p` still exists on this machine, as the same process (a zombie
/// still does: its parent has not reaped it yet).
pub fn process_exists(p: Process) -> bool {
    match start_time(p.pid) {
        None => false,
        Some(now) => p.start.is_none_or(|was| was == now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faultline_engine::syscalls::SyscallId;

    fn call(ts_ns: u64) -> SyscallEvent {
        SyscallEvent::complete(7, 7, SyscallId::from_name("read"), ts_ns, 1_000)
    }

    fn probe(still: Stillness, cost: usize) -> Probe {
        Probe { still, cost }
    }

    fn due_all(w: &mut SilenceWatch, now: Instant) -> Vec<Due> {
        w.due(now, |_| true, |_| true, |_| probe(Stillness::Unknown, 1))
            .due
    }

    /// A perf batch of one call at `ts_ns` from process 7 of target "db", arrived `at`.
    fn seen(w: &mut SilenceWatch, ts_ns: u64, at: Instant) {
        w.observe("db", "perf", Some(7), &[call(ts_ns)], at);
    }

    /// A watch (silent after 20 s) of targets `names`, each a process of this test's
    /// (so it exists, its start time readable) that made one call at `t0`.
    fn fallen_silent(names: &[&str], t0: Instant) -> SilenceWatch {
        let mut w = watch(20, 8);
        for name in names {
            w.observe(name, "perf", Some(std::process::id()), &[call(1)], t0);
        }
        w
    }

    fn watch(after_s: u64, max_targets: usize) -> SilenceWatch {
        SilenceWatch::new(Duration::from_secs(after_s), vec!["perf"], max_targets)
    }

    #[test]
    fn a_target_is_due_only_after_the_silence_and_by_the_time_that_passed() {
        let t0 = Instant::now();
        let mut w = watch(20, 8);
        w.observe("db", "perf", Some(7), &[call(5_000), call(9_000)], t0);
        assert!(due_all(&mut w, t0 + Duration::from_secs(19)).is_empty());
        assert_eq!(
            due_all(&mut w, t0 + Duration::from_secs(25)),
            vec![Due {
                target: "db".to_owned(),
                now_ns: 9_000 + 25_000_000_000,
                still: Stillness::Unknown,
                news: true,
            }]
        );
    }

    #[test]
    fn late_records_do_not_restart_the_silence_but_new_ones_do() {
        let t0 = Instant::now();
        let mut w = watch(20, 8);
        seen(&mut w, 9_000, t0);
        seen(&mut w, 8_000, t0 + Duration::from_secs(15));
        assert_eq!(due_all(&mut w, t0 + Duration::from_secs(21)).len(), 1);
        seen(&mut w, 10_000, t0 + Duration::from_secs(21));
        assert!(due_all(&mut w, t0 + Duration::from_secs(30)).is_empty());
    }

    #[test]
    fn a_stopped_capture_or_an_exited_target_is_not_advanced() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(60);
        let mut w = watch(20, 8);
        seen(&mut w, 1, t0);
        w.observe("db", "perf", Some(8), &[call(2)], t0);
        let unknown = |_: &[u32]| probe(Stillness::Unknown, 1);
        assert!(w
            .due(later, |s| s != "perf", |_| true, unknown)
            .due
            .is_empty());
        assert!(w.due(later, |_| true, |_| false, unknown).due.is_empty());
        // One of its processes is left: still the target, silent.
        assert_eq!(w.due(later, |_| true, |p| p.pid == 7, unknown).due.len(), 1);
    }

    #[test]
    fn only_the_processes_still_there_are_asked_how_they_stand_and_not_too_often() {
        let t0 = Instant::now();
        let own = std::process::id();
        let mut w = watch(20, 8);
        // This process (its start time readable) and a pid that does not exist.
        w.observe("db", "perf", Some(own), &[call(1)], t0);
        w.observe("db", "perf", Some(u32::MAX - 1), &[call(2)], t0);
        let asked = std::cell::RefCell::new(Vec::new());
        let still = |pids: &[u32]| {
            asked.borrow_mut().push(pids.to_vec());
            probe(Stillness::Asleep, 1)
        };
        let at = |s| t0 + Duration::from_secs(s);
        let due = w.due(at(60), |_| true, |p| p.pid == own, still).due;
        assert_eq!(due.first().map(|d| d.still), Some(Stillness::Asleep));
        assert_eq!(*asked.borrow(), vec![vec![own]]);
        // Read again only after PROBE_EVERY; a new record drops the reading. Only the
        // first advance of a silence (or a changed reading) is news.
        assert_eq!(due.first().map(|d| d.news), Some(true));
        let due = w.due(at(62), |_| true, |p| p.pid == own, still).due;
        assert_eq!(due.first().map(|d| d.news), Some(false));
        assert_eq!(asked.borrow().len(), 1);
        w.due(at(66), |_| true, |p| p.pid == own, still);
        assert_eq!(asked.borrow().len(), 2);
        w.observe("db", "perf", Some(own), &[call(3)], at(66));
        let due = w.due(at(90), |_| true, |p| p.pid == own, still).due;
        assert_eq!(asked.borrow().len(), 3);
        assert_eq!(due.first().map(|d| d.news), Some(true));
        // A process whose start time was never read may be another by now: not asked.
        let mut w = watch(20, 8);
        w.observe("db", "perf", Some(u32::MAX - 1), &[call(1)], t0);
        let due = w.due(at(60), |_| true, |_| true, still).due;
        assert_eq!(due.first().map(|d| d.still), Some(Stillness::Unknown));
        assert_eq!(asked.borrow().len(), 3);
    }

    #[test]
    fn readings_stay_within_the_budget_oldest_first_and_a_target_never_read_waits() {
        let t0 = Instant::now();
        let mut w = fallen_silent(&["a", "b", "c"], t0);
        let asked = std::cell::RefCell::new(Vec::new());
        // Each reading costs over half the budget: two fit in a check.
        let costly = |pids: &[u32]| {
            asked.borrow_mut().push(pids.len());
            probe(Stillness::Asleep, PROBE_BUDGET / 2 + 1)
        };
        let at = |s| t0 + Duration::from_secs(s);
        let names = |d: &[Due]| d.iter().map(|d| d.target.clone()).collect::<Vec<_>>();
        let check = w.due(at(30), |_| true, |_| true, costly);
        assert_eq!(
            names(&check.due),
            ["a", "b"],
            "c waits for its first reading"
        );
        assert_eq!((asked.borrow().len(), check.deferred), (2, 1));
        // Next check: a and b's readings are fresh, c is read.
        let check = w.due(at(31), |_| true, |_| true, costly);
        assert_eq!(names(&check.due), ["a", "b", "c"]);
        assert_eq!((asked.borrow().len(), check.deferred), (3, 0));
        // All stale: the two oldest are read again, c keeps its last reading meanwhile.
        let due = w.due(at(36), |_| true, |_| true, costly).due;
        assert_eq!(due.len(), 3);
        assert!(due.iter().all(|d| d.still == Stillness::Asleep));
        assert_eq!(asked.borrow().len(), 5);
        w.due(at(37), |_| true, |_| true, costly);
        assert_eq!(asked.borrow().len(), 6, "then c, the oldest");
    }

    #[test]
    fn a_target_silent_for_long_is_read_before_targets_that_fell_silent_since() {
        // Each reading takes the whole budget. Targets a0, a1, … fall silent a second
        // apart; z fell silent with a0 and lost the tie on its name. Never-read targets
        // taken by name, z would wait for ever.
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        let mut w = fallen_silent(&["z"], t0);
        let whole = |_: &[u32]| probe(Stillness::Asleep, PROBE_BUDGET + 1);
        let mut z_due = Vec::new();
        for k in 0..4u64 {
            let own = std::process::id();
            w.observe(&format!("a{k}"), "perf", Some(own), &[call(1)], at(k));
            let due = w.due(at(20 + k), |_| true, |_| true, whole).due;
            z_due.push(due.iter().any(|d| d.target == "z"));
        }
        assert_eq!(z_due, [false, true, true, true]);
    }

    #[test]
    fn a_reading_over_the_budget_is_taken_whole_and_paid_for() {
        // Three seconds' budget in one reading: the next target waits until the debt
        // is paid.
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        let mut w = fallen_silent(&["big", "small"], t0);
        let read = |pids: &[u32]| probe(Stillness::Asleep, 3 * PROBE_BUDGET * pids.len());
        let deferred: Vec<usize> = (20..24)
            .map(|s| w.due(at(s), |_| true, |_| true, read).deferred)
            .collect();
        assert_eq!(deferred, [1, 1, 1, 0]);
    }

    #[test]
    fn targets_past_the_cap_and_empty_batches_are_not_kept() {
        let t0 = Instant::now();
        let mut w = watch(1, 1);
        w.observe("a", "perf", None, &[], t0);
        w.observe("b", "perf", None, &[call(1)], t0);
        w.observe("c", "perf", None, &[call(1)], t0);
        let due = due_all(&mut w, t0 + Duration::from_secs(2));
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].target, "b");
    }

    #[test]
    fn the_latest_processes_are_kept_and_their_start_read_once() {
        let reads = std::cell::Cell::new(0);
        let start = |pid: u32| {
            reads.set(reads.get() + 1);
            Some(u64::from(pid) * 10)
        };
        let mut ps = Vec::new();
        for p in 0..40 {
            remember(&mut ps, p % 20, start);
        }
        assert_eq!(ps.len(), PIDS_KEPT);
        assert_eq!(ps[0].pid, 19);
        let before = reads.get();
        remember(&mut ps, 18, start);
        assert_eq!((ps[0].pid, ps[0].start), (18, Some(180)));
        assert_eq!(reads.get(), before, "a known pid is not read again");
        assert_eq!(ps.iter().filter(|p| p.pid == 18).count(), 1);
    }

    #[test]
    fn this_process_exists_and_a_reused_pid_is_another_process() {
        let me = std::process::id();
        let start = start_time(me);
        assert!(start.is_some());
        assert!(process_exists(Process { pid: me, start }));
        let other = Process {
            pid: me,
            start: start.map(|s| s + 1),
        };
        assert!(!process_exists(other));
    }

    #[test]
    fn other_sources_are_not_watched_and_a_wild_timestamp_does_not_stick() {
        let t0 = Instant::now();
        let mut w = watch(20, 8);
        w.observe("db", "otlp_grpc", Some(7), &[call(1)], t0);
        assert!(due_all(&mut w, t0 + Duration::from_secs(60)).is_empty());
        // A record stamped two hours ahead, then the target's usual ones.
        seen(&mut w, 7_200_000_000_000, t0);
        seen(&mut w, 5_000, t0 + Duration::from_secs(15));
        seen(&mut w, 6_000, t0 + Duration::from_secs(30));
        assert!(due_all(&mut w, t0 + Duration::from_secs(45)).is_empty());
    }
}
