//! The engine's output: one diagnosis of one target over one window.
//!
//! Plain serde data with snake_case keys; this is the stable JSON schema of
//! `faultline analyze --format json`, `GET /report` and the JSON-lines sink, so fields are
//! only ever added (bump [`REPORT_SCHEMA_VERSION`] when a meaning changes).

use serde::{Deserialize, Serialize};

use crate::params::Params;

/// Version of the report schema carried in every report.
pub const REPORT_SCHEMA_VERSION: u32 = 1;

/// PerfCompass's answer: where the root cause most likely lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The environment: a global impact (CPU cap, memory pressure, noisy neighbour, disk, network).
    External,
    /// Our own software: a local impact on a subset of threads (a bug).
    Internal,
    /// Nothing anomalous in the window.
    None,
}

impl Verdict {
    /// All verdicts, in the order metrics expose them as a state set.
    pub const ALL: [Verdict; 3] = [Verdict::External, Verdict::Internal, Verdict::None];

    /// The lower-case label used in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::External => "external",
            Verdict::Internal => "internal",
            Verdict::None => "none",
        }
    }
}

/// Which step of the paper's Fig. 3 decided the verdict, so an operator can see why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionPath {
    /// No thread was anomalous.
    NoAnomaly,
    /// τ > δ or τ < Δ.
    ImpactFactor,
    /// Borderline τ, I/O syscalls ranked top, τ recomputed on I/O syscalls only exceeded δ.
    FilteringMode,
    /// Borderline τ decided by Ω against β.
    Dispersion,
    /// A thread of the target burned a CPU after the onset (scheduler records, see
    /// [`crate::cpu_time`]): the service's own code, whatever τ said.
    CpuBurner,
    /// Other processes took the target's CPU after the onset (scheduler records, see
    /// [`crate::cpu_time`] and [`Report::cpu_taken`]): the environment, whatever τ said.
    CpuNeighbour,
    /// A CPU quota throttled the target after the onset: its threads were switched away
    /// while runnable with the CPU left idle (scheduler records, see
    /// [`crate::cpu_time::ThrottleTest`] and [`Report::cpu_taken`]): the environment,
    /// whatever τ said.
    CpuThrottled,
    /// The target's network namespace retransmitted a rising share of its TCP segments
    /// after the onset (see [`crate::net_loss::LossTest`] and [`Report::tcp_retransmits`]):
    /// packet loss on the path, the environment, whatever τ said.
    PacketLoss,
}

/// Kernel subsystem a syscall (and so a diagnosis) points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Subsystem {
    CpuScheduling,
    Memory,
    DiskIo,
    NetworkIo,
    Locking,
    ProcessManagement,
    Other,
    None,
}

impl Subsystem {
    /// All subsystems, in the order metrics expose them as a state set.
    pub const ALL: [Subsystem; 8] = [
        Subsystem::CpuScheduling,
        Subsystem::Memory,
        Subsystem::DiskIo,
        Subsystem::NetworkIo,
        Subsystem::Locking,
        Subsystem::ProcessManagement,
        Subsystem::Other,
        Subsystem::None,
    ];

    /// The snake_case label used in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Subsystem::CpuScheduling => "cpu_scheduling",
            Subsystem::Memory => "memory",
            Subsystem::DiskIo => "disk_io",
            Subsystem::NetworkIo => "network_io",
            Subsystem::Locking => "locking",
            Subsystem::ProcessManagement => "process_management",
            Subsystem::Other => "other",
            Subsystem::None => "none",
        }
    }

    /// Disk or network I/O: the syscalls PerfCompass's filtering mode keeps.
    pub fn is_io(self) -> bool {
        matches!(self, Subsystem::DiskIo | Subsystem::NetworkIo)
    }
}

/// What made the engine produce this report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// Continuous mode: the engine's own cadence.
    Cadence,
    /// An external alarm at a given time (the paper's mode).
    OnDemand,
    /// The stream ended (offline analysis, shutdown flush).
    EndOfStream,
}

/// Thread counts of the window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadCounts {
    /// Threads that made at least one syscall in the window.
    pub total: u64,
    /// Threads with at least one outlier (direct or indirect impact).
    pub affected: u64,
    /// Affected threads whose onset time σ < α.
    pub directly_affected: u64,
}

/// Distribution of per-thread onset times σ over the affected threads, in seconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OnsetDistribution {
    pub count: u64,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub max: f64,
    pub mean: f64,
}

/// One entry of an affected-syscall ranking.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RankedSyscall {
    pub syscall: String,
    /// Relative increase over the baseline: 0.5 means +50 %.
    pub increase_ratio: f64,
    pub subsystem: Subsystem,
}

/// Per-syscall activity of the target in the window (for latency and rate metrics).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SyscallActivity {
    pub syscall: String,
    pub calls: u64,
    pub calls_per_second: f64,
    pub mean_latency_seconds: f64,
}

/// Pairing and bounding counters since the engine started, so nothing is lost silently.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineCounters {
    pub events: u64,
    pub calls: u64,
    pub unmatched_exits: u64,
    pub lost_enters: u64,
    pub duplicate_records: u64,
    pub out_of_order: u64,
    pub evicted_threads: u64,
    pub dropped_targets: u64,
    /// Entries whose exit never came (a new entry of the same thread arrived first).
    #[serde(default)]
    pub lost_exits: u64,
    /// Calls of a thread's syscalls beyond `max_syscalls_per_thread` (counted, not tested).
    #[serde(default)]
    pub untracked_calls: u64,
    /// On-CPU records (`EventKind::OnCpu`) taken into the threads' CPU time.
    #[serde(default)]
    pub cpu_records: u64,
    /// Switch-off-CPU records (`EventKind::OffCpu`) taken into the threads' CPU time.
    #[serde(default)]
    pub switch_records: u64,
    /// Of those, switches blocked uninterruptibly outside any call: waits in a page fault
    /// (`crate::cpu_time::PagingTest`).
    #[serde(default)]
    pub page_wait_records: u64,
    /// Reports of lost records (`EventKind::Lost`, e.g. perf's ring-buffer overruns).
    #[serde(default)]
    pub loss_reports: u64,
    /// Enter/exit pairs dropped because a loss was reported between the two: the exit
    /// may be a later call's, its own exit and that call's entry lost.
    #[serde(default)]
    pub pairs_across_loss: u64,
    /// Channels of idle syscalls handed to another syscall of the same thread (it used
    /// more syscall types over its life than `max_syscalls_per_thread`).
    #[serde(default)]
    pub recycled_channels: u64,
    /// Calls whose syscall id no name table has: past the tables, or the one reserved
    /// for the gap channel (65535); only from a malformed batch or library caller.
    /// Analysed as unknown syscalls (id 0).
    #[serde(default)]
    pub reserved_syscall_ids: u64,
    /// Records stamped more than an hour from their target's clock, and completed calls
    /// ending more than an hour ahead of it, left out (see [`crate::clock_screen`]): a
    /// corrupt or hostile timestamp or duration, or the first records after the clock
    /// itself jumped.
    #[serde(default)]
    pub clock_outliers: u64,
    /// Targets restarted because their clock jumped back by more than an hour.
    #[serde(default)]
    pub clock_resets: u64,
    /// Records whose counters went into the vital signs (counters records, and calls
    /// that carried counters).
    #[serde(default)]
    pub counter_records: u64,
    /// Of those, records of threads past `max_threads` with counters: they count for
    /// their target's totals, not for a thread of their own.
    #[serde(default)]
    pub untracked_counter_records: u64,
    /// TCP segment records (a network namespace's segments sent and retransmitted, see
    /// [`crate::net_loss`]) taken into their targets' bins (not a second record of the
    /// same reading, nor one older than the bins kept). Left out of the JSON while 0,
    /// so a report of a source without them reads as before.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub segment_records: u64,
    /// TCP segment records of a target that had made no call yet, left out: the sampler
    /// reads a namespace for every process name in it, and one that makes no call is no
    /// target (nor is a target's first second, before its calls arrive).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub untargeted_segment_records: u64,
}

/// One diagnosis of one target over one window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema_version: u32,
    pub target: String,
    pub trigger: Trigger,
    /// Window bounds, in the trace's own clock.
    pub window_start_ns: u64,
    pub window_end_ns: u64,
    /// Estimated time the anomaly began (absent when the verdict is `none`).
    pub anomaly_onset_ns: Option<u64>,
    pub verdict: Verdict,
    pub decided_by: DecisionPath,
    /// τ: directly affected threads / active threads.
    pub impact_factor: f64,
    /// τ recomputed on I/O syscalls only, when filtering mode ran.
    pub impact_factor_filtered: Option<f64>,
    /// Ω: standard deviation of σ over the affected threads.
    pub onset_dispersion_seconds: f64,
    pub threads: ThreadCounts,
    pub onset_times_seconds: OnsetDistribution,
    pub top_syscalls_by_time: Vec<RankedSyscall>,
    pub top_syscalls_by_frequency: Vec<RankedSyscall>,
    /// The subsystem the ranking points at.
    pub subsystem: Subsystem,
    /// One plain-language sentence for the on-call engineer.
    pub hint: String,
    /// Busiest syscalls of the window, bounded by `top_n`.
    pub syscalls: Vec<SyscallActivity>,
    pub events_analyzed: u64,
    pub counters: EngineCounters,
    pub parameters: Params,
    /// τ's denominator: threads testable between the onset and onset + α (see
    /// `diagnosis` module docs for why this, not "any call in the window").
    #[serde(default)]
    pub active_threads: u64,
    /// Largest increase of the off-CPU gap between a thread's consecutive calls, over
    /// the affected threads (the CPU-contention signal; not a syscall, so not ranked).
    #[serde(default)]
    pub cpu_gap_increase_ratio: Option<f64>,
    /// The affected threads, earliest onset first (at most 32), so an operator can see
    /// which threads and which call showed the impact.
    #[serde(default)]
    pub affected_threads: Vec<AffectedThread>,
    /// The target's threads that burned a CPU after the onset (only with scheduler
    /// records; see [`crate::cpu_time`]), which make the verdict internal.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpu_burners: Vec<crate::cpu_time::Burner>,
    /// How often the target's threads handed their CPU to another process, or left it
    /// idle while still runnable (a CPU quota), when they left it, before and after the
    /// onset (only with switch records naming the next task); `taken` and `throttled` say
    /// whether that made the verdict external. When the quota alone found the anomaly on
    /// demand, the span after is the `persistence_seconds` before the alarm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_taken: Option<CpuTaken>,
    /// The retransmitted share of the TCP segments the target's network namespace sent,
    /// before and after the onset, when a source sampled them (see [`crate::net_loss`]);
    /// `lossy` says whether a rise made the diagnosis (packet loss on the path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_retransmits: Option<crate::net_loss::TcpRetransmits>,
    /// What the counters say the threads were doing (ChopStix's vital signs and
    /// symptoms), when the source delivered counters; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vital_signs: Option<crate::vital_signs::VitalSigns>,
    /// Seconds from the target's latest record (as of the latest batch received) to the
    /// window end: 0 while it makes calls; grows when the host advances the clock of a
    /// target that sent nothing (`Engine::advance`): its threads are stopped (a frozen
    /// cgroup, a paused VM), all wait in a call (a hang), or all sleep in their usual
    /// waits (an idle server with no periodic thread, when its host saw them asleep).
    #[serde(default)]
    pub silent_seconds: f64,
}

/// The target's switches away from the CPU that handed it to another process's task, as
/// a share of all its switches away, before and after the onset.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpuTaken {
    /// Median share over the spans before the onset (see `Target::evaluate`).
    pub share_before: f64,
    /// Share in the `persistence_seconds` after the onset, or in those before the alarm
    /// (continuous mode: before the latest data) when that span is later and its share
    /// higher.
    pub share_after: f64,
    /// Switches away after the onset (all threads).
    pub switches_after: u64,
    /// Whether the shares passed `neighbour_share` and `neighbour_rise`.
    pub taken: bool,
    /// Share of the switches away that left the CPU idle, median over the spans before
    /// the onset: how often the CPU had nothing else to run.
    #[serde(default)]
    pub idle_share_before: f64,
    /// The same share in the span `share_after` covers.
    #[serde(default)]
    pub idle_share_after: f64,
    /// Whether the CPU became the scarce resource: idle in at least a fifth of the
    /// switches before, next to never after, and other processes got it
    /// (`crate::cpu_time::SaturationTest`). Makes the subsystem CPU scheduling.
    #[serde(default)]
    pub saturated: bool,
    /// Share of the switches away that were preemptions leaving the CPU idle, median over
    /// the spans before the onset: a thread that could run, stopped with nothing else to
    /// run, is one a CPU quota throttled.
    #[serde(default)]
    pub throttled_share_before: f64,
    /// The same share after the onset (the higher of the span after the onset and the
    /// span before the alarm, when that has enough switches), so it may cover another span
    /// than `switches_after`.
    #[serde(default)]
    pub throttled_share_after: f64,
    /// Whether the shares passed `crate::cpu_time::ThrottleTest`: a CPU quota throttled
    /// the target. Makes an anomaly without a CPU burner external, with the subsystem CPU
    /// scheduling.
    #[serde(default)]
    pub throttled: bool,
    /// Share of the blocking switches away that waited in a page fault (blocked
    /// uninterruptibly outside any call), median over the spans before the onset.
    #[serde(default)]
    pub paging_share_before: f64,
    /// The same share after the onset (the higher of the span after the onset and the
    /// span before the alarm, as for `throttled_share_after`).
    #[serde(default)]
    pub paging_share_after: f64,
    /// Whether the shares passed `crate::cpu_time::PagingTest`: the target's threads
    /// waited in page faults, short of memory. Makes the subsystem memory.
    #[serde(default)]
    pub paging: bool,
}

/// One affected thread of a report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AffectedThread {
    pub tid: u32,
    /// σ: seconds from max(onset, start of its execution unit) to its first confirmed outlier.
    pub onset_seconds: f64,
    /// The call whose moving average confirmed first ("cpu_gap" for the time between calls).
    pub syscall: String,
    /// `time` or `frequency`.
    pub channel: String,
    /// Share of the thread's tested bins with an outlier in the `persistence_seconds`
    /// after its onset (1 when it is stuck in one call): a fault persists, a burst does not.
    #[serde(default)]
    pub persistence: f64,
    /// The thread's calls between the anomaly onset and its own onset (interpolated
    /// within time bins): how much of its own activity it took to show the fault.
    #[serde(default)]
    pub onset_calls: f64,
    /// The thread's call rate in the `persistence_seconds` before the anomaly onset.
    #[serde(default)]
    pub calls_per_second_before: f64,
    /// Busy and tested right after the onset: part of τ's population.
    #[serde(default)]
    pub active: bool,
    /// Share of the `persistence_seconds` after its onset the thread lost to slower
    /// calls and longer gaps between them (their excess over the baseline mean; 1 when
    /// the fault stopped it): how much the fault cost it.
    #[serde(default)]
    pub lost_share: f64,
}

/// α and β derived from a run under a known external fault (the paper's calibration).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    pub target: String,
    /// α to use: the largest onset among the threads busy at the fault (far-out
    /// stragglers set aside), never below the configured α.
    pub alpha_seconds: f64,
    /// Onset dispersion observed under the known external fault.
    pub beta_seconds: f64,
    /// The largest onset itself, before the floor (for the operator's record).
    pub measured_alpha_seconds: f64,
    /// `min_active_calls` scaled to the calibrated α (the same calls per second).
    pub min_active_calls: u32,
    /// `direct_within_calls` scaled likewise.
    pub direct_within_calls: u32,
    pub affected_threads: u64,
    /// Onsets left out of α as far-out stragglers.
    pub stragglers: u64,
    pub window_start_ns: u64,
    pub window_end_ns: u64,
}

/// Rounds to 12 significant digits so every float in a report survives a JSON round trip
/// bit-exactly (serde_json's default parser is exact only for short mantissas); the
/// native and WASM engines then produce identical JSON.
pub fn tidy(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    // Values below 1e-11 keep fewer digits (a power of ten above 1e22 is not exact).
    let e = (11 - x.abs().log10().floor() as i32).min(22);
    if e < -22 {
        return x;
    }
    let p = 10f64.powi(e.abs());
    if e >= 0 {
        (x * p).round() / p
    } else {
        (x / p).round() * p
    }
}

impl Report {
    /// Median and largest `lost_share` of the listed affected threads (`None` when none is
    /// listed): what the fault cost them, which τ and Ω do not say.
    pub fn time_lost(&self) -> Option<(f64, f64)> {
        let mut v: Vec<f64> = self.affected_threads.iter().map(|t| t.lost_share).collect();
        v.sort_by(f64::total_cmp);
        Some((*v.get(v.len() / 2)?, *v.last()?))
    }

    /// Applies [`tidy`] to every float of the report.
    pub fn tidy(&mut self) {
        self.impact_factor = tidy(self.impact_factor);
        self.impact_factor_filtered = self.impact_factor_filtered.map(tidy);
        self.onset_dispersion_seconds = tidy(self.onset_dispersion_seconds);
        let o = &mut self.onset_times_seconds;
        for v in [&mut o.min, &mut o.p50, &mut o.p90, &mut o.max, &mut o.mean] {
            *v = tidy(*v);
        }
        for r in self
            .top_syscalls_by_time
            .iter_mut()
            .chain(self.top_syscalls_by_frequency.iter_mut())
        {
            r.increase_ratio = tidy(r.increase_ratio);
        }
        for s in &mut self.syscalls {
            s.calls_per_second = tidy(s.calls_per_second);
            s.mean_latency_seconds = tidy(s.mean_latency_seconds);
        }
        self.cpu_gap_increase_ratio = self.cpu_gap_increase_ratio.map(tidy);
        for a in &mut self.affected_threads {
            a.onset_seconds = tidy(a.onset_seconds);
            a.lost_share = tidy(a.lost_share);
        }
        for b in &mut self.cpu_burners {
            b.share_before = tidy(b.share_before);
            b.share_after = tidy(b.share_after);
        }
        if let Some(c) = self.cpu_taken.as_mut() {
            c.share_before = tidy(c.share_before);
            c.share_after = tidy(c.share_after);
            c.idle_share_before = tidy(c.idle_share_before);
            c.throttled_share_before = tidy(c.throttled_share_before);
            c.throttled_share_after = tidy(c.throttled_share_after);
            c.idle_share_after = tidy(c.idle_share_after);
        }
    }
}

/// Whether a counter is 0 (serde's `skip_serializing_if` takes a reference).
fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tidy_floats_round_trip_through_json() {
        for x in [
            12.844444444444443,
            4.183652377240842e-6,
            0.1 + 0.2,
            1e-12 / 3.0,
            123456.789,
        ] {
            let t = tidy(x);
            assert!((t - x).abs() <= x.abs() * 1e-11 + 1e-22);
            let back: f64 = serde_json::from_str(&serde_json::to_string(&t).unwrap_or_default())
                .unwrap_or(f64::NAN);
            assert_eq!(back.to_bits(), t.to_bits(), "{x}");
        }
    }
}
