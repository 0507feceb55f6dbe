//! Fault differentiation (PerfCompass §3.4, §3.6, Fig. 3): onset times σ, impact factor
//! τ, onset dispersion Ω, filtering mode and the external/internal verdict.
//!
//! Inputs are per-thread findings over one window with a known anomaly onset T0:
//! each affected thread's onset σ = first confirmed outlier − max(T0, start of the unit
//! it happened in). Measuring from max(T0, unit start) rather than from the unit start
//! alone makes σ mean "how soon after the fault reached this thread": a busy thread whose
//! unit began minutes before the fault is not given a huge onset. Likewise a thread busy at
//! T0 that then sat at least α in one call counts from when it ran again (see
//! `target::resumed_at`): a parked worker cannot show a fault.
//!
//! "Active in the window" (τ's denominator) means *testable right after the onset*: the
//! thread made at least `min_active_calls` calls between T0 and T0 + α and had moving
//! averages tested against a usable baseline there (plus the directly affected threads
//! themselves). A thread parked in timed waits (MariaDB's background threads make 50–80
//! calls/s, mostly 1 s futex/poll timeouts), or one too new to have a baseline, could not
//! have shown a direct impact within α, and counting it would make every environment
//! fault look local (measured: the CPU-cap case drops from τ = 1.0 to 0.5).
//!
//! "Directly affected" is σ < α, or — for a thread that was not busy right after the
//! onset — showing the fault within its first `direct_within_calls` calls after it
//! (`Finding::by_activity`; such a thread joins the population): an idle worker cannot
//! show a fault before it runs.

use crate::report::{DecisionPath, Verdict};

/// One affected thread's contribution.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Finding {
    /// σ in seconds.
    pub onset_seconds: f64,
    /// The confirming channel is a disk/network I/O syscall.
    pub io: bool,
    /// Directly affected judged in the thread's own activity (see
    /// `Params::direct_within_calls`), whatever its wall-clock σ.
    pub by_activity: bool,
}

impl Finding {
    pub fn direct(&self, alpha_seconds: f64) -> bool {
        self.onset_seconds < alpha_seconds || self.by_activity
    }
}

/// What the diagnosis needs beyond the findings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Population {
    /// Threads testable in [T0, T0 + α] (any channel).
    pub active: u64,
    /// Threads testable in [T0, T0 + α] on disk/network I/O channels.
    pub active_io: u64,
}

/// Thresholds of Fig. 3.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Thresholds {
    pub alpha_seconds: f64,
    pub beta_seconds: f64,
    /// δ
    pub external: f64,
    /// Δ
    pub internal: f64,
}

/// The differentiation result.
#[derive(Clone, Debug, PartialEq)]
pub struct Differentiation {
    pub verdict: Verdict,
    pub decided_by: DecisionPath,
    pub impact_factor: f64,
    pub impact_factor_filtered: Option<f64>,
    pub dispersion_seconds: f64,
    pub affected: u64,
    pub directly_affected: u64,
    pub active: u64,
}

/// Runs Fig. 3 on the findings. `top_ranked_io` says whether the ranking's top syscalls
/// are disk or network I/O (the trigger for filtering mode).
pub fn differentiate(
    findings: &[Finding],
    pop: Population,
    th: Thresholds,
    top_ranked_io: bool,
) -> Differentiation {
    let affected = findings.len() as u64;
    let direct = findings
        .iter()
        .filter(|f| f.direct(th.alpha_seconds))
        .count() as u64;
    let active = pop.active.max(direct);
    let onsets: Vec<f64> = findings.iter().map(|f| f.onset_seconds).collect();
    let (_, dispersion) = crate::stats::mean_std(&onsets);
    let mut out = Differentiation {
        verdict: Verdict::None,
        decided_by: DecisionPath::NoAnomaly,
        impact_factor: 0.0,
        impact_factor_filtered: None,
        dispersion_seconds: dispersion,
        affected,
        directly_affected: direct,
        active,
    };
    if affected == 0 || active == 0 {
        return out;
    }
    let tau = direct as f64 / active as f64;
    out.impact_factor = tau;
    if tau > th.external {
        out.verdict = Verdict::External;
        out.decided_by = DecisionPath::ImpactFactor;
        return out;
    }
    if tau < th.internal {
        out.verdict = Verdict::Internal;
        out.decided_by = DecisionPath::ImpactFactor;
        return out;
    }
    if top_ranked_io {
        let direct_io = findings
            .iter()
            .filter(|f| f.io && f.direct(th.alpha_seconds))
            .count() as u64;
        let active_io = pop.active_io.max(direct_io);
        if active_io > 0 {
            let tau_f = direct_io as f64 / active_io as f64;
            out.impact_factor_filtered = Some(tau_f);
            if tau_f > th.external {
                out.verdict = Verdict::External;
                out.decided_by = DecisionPath::FilteringMode;
                return out;
            }
        }
    }
    out.decided_by = DecisionPath::Dispersion;
    out.verdict = if dispersion > th.beta_seconds {
        Verdict::Internal
    } else {
        Verdict::External
    };
    out
}

/// Fig. 3 extended by the scheduler's account: an anomaly during which some of the
/// target's own threads burned a CPU (`burners` of them, see [`crate::cpu_time`]) is
/// internal, whatever τ says. A runaway loop holds the CPU every other thread needs, so
/// all of them slow down at once and τ reads like an environment fault (measured: Apache
/// and PostgreSQL runaways at τ = 1.0). On demand a burner is an anomaly even when no
/// thread's calls show one (see `Target::evaluate`), so `None` becomes internal too.
pub fn with_cpu_burners(d: Differentiation, burners: usize) -> Differentiation {
    if burners == 0 || d.verdict == Verdict::Internal {
        return d;
    }
    Differentiation {
        verdict: Verdict::Internal,
        decided_by: DecisionPath::CpuBurner,
        ..d
    }
}

/// Fig. 3 extended by the scheduler's account, the other way round: an anomaly during
/// which other processes took the target's CPU (`taken`, see [`crate::cpu_time`]) is
/// external, unless a thread of the target burned a CPU (`burners`). A co-located hog delays the
/// service by keeping its threads waiting for the CPU, which changes their calls little:
/// only some threads show outliers, and τ reads like a bug (measured: Apache under eight
/// hogs, p50 1 → 180 ms, τ 0.67–0.80). Anomalies only: `None` stays `None`.
pub fn with_cpu_neighbours(d: Differentiation, taken: bool, burners: usize) -> Differentiation {
    if !taken || burners > 0 || d.verdict != Verdict::Internal {
        return d;
    }
    Differentiation {
        verdict: Verdict::External,
        decided_by: DecisionPath::CpuNeighbour,
        ..d
    }
}

/// Fig. 3 extended by the scheduler's account: an anomaly during which a CPU quota
/// throttled the target (`throttled`, see [`crate::cpu_time::ThrottleTest`]) is external,
/// unless a thread of the target burned a CPU (`burners`: a runaway inside a capped group
/// is what uses up its quota). A quota stops every thread of the group at once, but only
/// when the group runs out, so busy threads meet it at different times and τ can read
/// like a bug. On demand a throttled target is an anomaly even when no thread's calls
/// show one (`by_quota`, see `Target::evaluate`): then `None` becomes external too;
/// otherwise, as for other processes taking the CPU, only an internal verdict changes.
pub fn with_cpu_quota(
    d: Differentiation,
    throttled: bool,
    burners: usize,
    by_quota: bool,
) -> Differentiation {
    environment_evidence(d, throttled, burners, by_quota, DecisionPath::CpuThrottled)
}

/// Fig. 3 extended by the kernel's TCP account: an anomaly during which the target's
/// network namespace retransmitted more of its segments while it went on sending them
/// (`lossy`: [`crate::net_loss::LossTest::lossy`] and `steady`) is external: the network
/// dropped them, not the service. Not over a CPU burner (the service's own loop is then
/// the finding). When only the TCP account showed an anomaly (`by_loss`), `None` becomes
/// external too.
pub fn with_packet_loss(
    d: Differentiation,
    lossy: bool,
    burners: usize,
    by_loss: bool,
) -> Differentiation {
    environment_evidence(d, lossy, burners, by_loss, DecisionPath::PacketLoss)
}

/// The shape the quota and packet-loss rules share: evidence of the environment makes an
/// internal verdict external, and `None` too when that evidence alone found the anomaly
/// (`alone`); never over a CPU burner of the target's own, nor over an external verdict,
/// which keeps its own reason.
fn environment_evidence(
    d: Differentiation,
    evidence: bool,
    burners: usize,
    alone: bool,
    path: DecisionPath,
) -> Differentiation {
    let turns = match d.verdict {
        Verdict::Internal => true,
        Verdict::None => alone,
        Verdict::External => false,
    };
    if !evidence || burners > 0 || !turns {
        return d;
    }
    Differentiation {
        verdict: Verdict::External,
        decided_by: path,
        ..d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TH: Thresholds = Thresholds {
        alpha_seconds: 0.5,
        beta_seconds: 0.25,
        external: 0.9,
        internal: 0.8,
    };

    fn f(onset: f64, io: bool) -> Finding {
        Finding {
            onset_seconds: onset,
            io,
            by_activity: false,
        }
    }

    #[test]
    fn fig3_branches() {
        let pop = |a| Population {
            active: a,
            active_io: a,
        };
        let all: Vec<_> = (0..10).map(|_| f(0.1, false)).collect();
        let d = differentiate(&all, pop(10), TH, false);
        assert_eq!(
            (d.verdict, d.decided_by),
            (Verdict::External, DecisionPath::ImpactFactor)
        );
        let d = differentiate(&all[..3], pop(10), TH, false);
        assert_eq!(d.verdict, Verdict::Internal);
        assert!((d.impact_factor - 0.3).abs() < 1e-12);
        // borderline 0.85 with spread onsets → internal by Ω
        let mut b: Vec<_> = (0..17).map(|i| f(0.02 * i as f64, false)).collect();
        b.extend((0..3).map(|_| f(3.0, false)));
        let d = differentiate(&b, pop(20), TH, false);
        assert_eq!(
            (d.verdict, d.decided_by),
            (Verdict::Internal, DecisionPath::Dispersion)
        );
        // borderline, I/O top-ranked, all I/O-testable threads hit → filtering mode
        let io: Vec<_> = (0..17).map(|_| f(0.1, true)).collect();
        let d = differentiate(
            &io,
            Population {
                active: 20,
                active_io: 17,
            },
            TH,
            true,
        );
        assert_eq!(
            (d.verdict, d.decided_by),
            (Verdict::External, DecisionPath::FilteringMode)
        );
        assert_eq!(d.impact_factor_filtered, Some(1.0));
        let d = differentiate(&[], pop(5), TH, false);
        assert_eq!(d.verdict, Verdict::None);
        // Late in wall time but direct in its own activity: counts as direct.
        let mut late: Vec<_> = (0..9).map(|_| f(0.1, false)).collect();
        late.push(Finding {
            onset_seconds: 3.0,
            io: false,
            by_activity: true,
        });
        let d = differentiate(&late, pop(10), TH, false);
        assert_eq!((d.directly_affected, d.verdict), (10, Verdict::External));
    }

    #[test]
    fn a_cpu_burner_makes_an_environment_verdict_internal() {
        let pop = Population {
            active: 10,
            active_io: 10,
        };
        let all: Vec<_> = (0..10).map(|_| f(0.1, false)).collect();
        let d = differentiate(&all, pop, TH, false);
        assert_eq!(with_cpu_burners(d.clone(), 0), d);
        let b = with_cpu_burners(d.clone(), 1);
        assert_eq!(
            (b.verdict, b.decided_by, b.impact_factor),
            (Verdict::Internal, DecisionPath::CpuBurner, 1.0)
        );
        // A burner with no outlying thread (found on demand by its share alone) is
        // internal; an internal verdict keeps its own reason.
        let none = differentiate(&[], pop, TH, false);
        let alone = with_cpu_burners(none.clone(), 2);
        assert_eq!(
            (alone.verdict, alone.decided_by, alone.affected),
            (Verdict::Internal, DecisionPath::CpuBurner, 0)
        );
        let internal = differentiate(&all[..2], pop, TH, false);
        assert_eq!(with_cpu_burners(internal.clone(), 2), internal);
    }

    #[test]
    fn packet_loss_makes_a_local_verdict_or_the_loss_alone_external() {
        let pop = Population {
            active: 10,
            active_io: 10,
        };
        let few: Vec<_> = (0..3).map(|_| f(0.1, true)).collect();
        let local = differentiate(&few, pop, TH, true);
        assert_eq!(local.verdict, Verdict::Internal);
        assert_eq!(with_packet_loss(local.clone(), false, 0, false), local);
        let lost = with_packet_loss(local.clone(), true, 0, false);
        assert_eq!(
            (lost.verdict, lost.decided_by, lost.impact_factor),
            (Verdict::External, DecisionPath::PacketLoss, 0.3)
        );
        // A burner of the target's own keeps it internal.
        assert_eq!(with_packet_loss(local.clone(), true, 1, false), local);
        // No anomaly in the calls: external only when the loss itself is the anomaly.
        let none = differentiate(&[], pop, TH, false);
        assert_eq!(with_packet_loss(none.clone(), true, 0, false), none);
        let alone = with_packet_loss(none, true, 0, true);
        assert_eq!(
            (alone.verdict, alone.decided_by),
            (Verdict::External, DecisionPath::PacketLoss)
        );
        // An external verdict keeps its own reason.
        let all: Vec<_> = (0..10).map(|_| f(0.1, true)).collect();
        let ext = differentiate(&all, pop, TH, true);
        assert_eq!(with_packet_loss(ext.clone(), true, 0, false), ext);
    }

    #[test]
    fn other_processes_taking_the_cpu_make_a_local_verdict_external() {
        let pop = Population {
            active: 10,
            active_io: 10,
        };
        let few: Vec<_> = (0..3).map(|_| f(0.1, false)).collect();
        let local = differentiate(&few, pop, TH, false);
        assert_eq!(local.verdict, Verdict::Internal);
        assert_eq!(with_cpu_neighbours(local.clone(), false, 0), local);
        let taken = with_cpu_neighbours(local.clone(), true, 0);
        assert_eq!(
            (taken.verdict, taken.decided_by, taken.impact_factor),
            (Verdict::External, DecisionPath::CpuNeighbour, 0.3)
        );
        // A burner of the target's own keeps it internal, whichever step said so; no
        // anomaly stays none.
        assert_eq!(with_cpu_neighbours(local.clone(), true, 1), local);
        let all: Vec<_> = (0..10).map(|_| f(0.1, false)).collect();
        let burner = with_cpu_burners(differentiate(&all, pop, TH, false), 1);
        assert_eq!(with_cpu_neighbours(burner.clone(), true, 1), burner);
        let none = differentiate(&[], pop, TH, false);
        assert_eq!(with_cpu_neighbours(none.clone(), true, 0), none);
    }

    #[test]
    fn a_cpu_quota_makes_a_local_or_empty_verdict_external() {
        let pop = Population {
            active: 10,
            active_io: 10,
        };
        let few: Vec<_> = (0..3).map(|_| f(0.1, false)).collect();
        let local = differentiate(&few, pop, TH, false);
        assert_eq!(with_cpu_quota(local.clone(), false, 0, false), local);
        let quota = with_cpu_quota(local.clone(), true, 0, false);
        assert_eq!(
            (quota.verdict, quota.decided_by, quota.impact_factor),
            (Verdict::External, DecisionPath::CpuThrottled, 0.3)
        );
        // The anomaly a throttled target is on demand, with no thread's calls showing it;
        // no other `None` changes.
        let none = differentiate(&[], pop, TH, false);
        let alone = with_cpu_quota(none.clone(), true, 0, true);
        assert_eq!(alone.verdict, Verdict::External);
        assert_eq!(with_cpu_quota(none.clone(), true, 0, false), none);
        // A burner of the target's own used the quota up; an environment verdict keeps
        // the step that decided it.
        assert_eq!(with_cpu_quota(local.clone(), true, 1, false), local);
        let all: Vec<_> = (0..10).map(|_| f(0.1, false)).collect();
        let global = differentiate(&all, pop, TH, false);
        assert_eq!(with_cpu_quota(global.clone(), true, 0, false), global);
    }
}
