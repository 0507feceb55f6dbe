//! `faultline analyze`: offline diagnosis of a recorded trace — the verdict timeline and
//! the diagnosis of each anomaly, as text or as the documented JSON schema.

use std::fmt::Write as _;
use std::sync::Arc;

use anyhow::Context;
use faultline_engine::report::RankedSyscall;
use faultline_engine::{Report, Stillness, Verdict};
use serde::Serialize;

use super::offline::{self, OfflineArgs};
use crate::pipeline::telemetry::{DropReason, Telemetry};

/// Arguments of `faultline analyze`.
#[derive(Debug, clap::Args)]
pub struct AnalyzeArgs {
    #[command(flatten)]
    pub offline: OfflineArgs,
    /// An external alarm says the target became slow at this time (trace clock, ns): diagnose the
    /// window around it, with onsets measured from it (PerfCompass's on-demand mode).
    #[arg(long)]
    pub trigger_at: Option<u64>,
    /// The recording ran until this time (trace clock, ns), past its last record: each
    /// target's clock moves on to it, so a target that fell silent (frozen, hung) before
    /// the end is still diagnosed, as the live plugin does (at most an hour past a target's
    /// last record: later records would be clock outliers). Default: the last record.
    #[arg(long, value_name = "NS")]
    pub recorded_until: Option<u64>,
    /// With `--recorded-until`: every thread of the target's processes was seen asleep
    /// in a wait then (no freezer, no stop signal; what `faultline run` reads from
    /// `/proc` for a silent live target), so a silence is judged as waiting, not as the
    /// target stopped from outside. Applies to every target of the recording.
    #[arg(long, requires = "recorded_until")]
    pub recorded_asleep: bool,
    /// Output format; `json` prints one object per target (one line each).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// How `analyze` prints its result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// One step of the verdict timeline.
#[derive(Clone, Debug, Serialize)]
pub struct TimelineEntry {
    pub window_start_ns: u64,
    pub window_end_ns: u64,
    pub verdict: Verdict,
    pub impact_factor: f64,
}

/// A maximal run of consecutive non-`none` reports.
#[derive(Clone, Debug, Serialize)]
pub struct Anomaly {
    /// End of the first anomalous window (when the engine raised it).
    pub detected_at_ns: u64,
    /// End of the last anomalous window.
    pub last_seen_ns: u64,
    /// Most frequent verdict over the run (ties favour the first report's).
    pub verdict: Verdict,
    pub reports: u64,
    /// The diagnosis made when the anomaly was first detected.
    pub diagnosis: Report,
}

/// The JSON schema of `analyze --format json`: the primary diagnosis's fields at the top
/// level (so `verdict`, `impact_factor`, … are where scripts expect them), plus the timeline
/// and every anomaly.
#[derive(Clone, Debug, Serialize)]
pub struct TargetAnalysis {
    #[serde(flatten)]
    pub diagnosis: Report,
    pub timeline: Vec<TimelineEntry>,
    pub anomalies: Vec<Anomaly>,
    pub input: InputSummary,
}

/// What was read, so a reader can tell a quiet trace from a broken one.
#[derive(Clone, Debug, Default, Serialize)]
pub struct InputSummary {
    pub input: String,
    pub events_routed: u64,
    pub events_received: u64,
    pub decode_errors: u64,
    pub events_dropped: u64,
}

/// Runs the analysis.
pub fn run(args: &AnalyzeArgs) -> anyhow::Result<()> {
    let out = analyze(args)?;
    let mut stdout = String::new();
    for t in &out {
        match args.format {
            Format::Json => {
                stdout.push_str(&serde_json::to_string(t)?);
                stdout.push('\n');
            }
            Format::Text => render_text(t, &mut stdout),
        }
    }
    super::write_stdout(&stdout)
}

/// The analysis of every target in the input.
pub fn analyze(args: &AnalyzeArgs) -> anyhow::Result<Vec<TargetAnalysis>> {
    let params = offline::load_params(&args.offline)?;
    let max_targets = params.max_targets;
    let telemetry = Arc::new(Telemetry::default());
    let mut engine = offline::build_engine(&args.offline, params, &telemetry)?;
    let (targets, mut reports, events) =
        offline::drive(&args.offline, engine.as_mut(), &telemetry, max_targets)?;
    if let Some(until) = args.recorded_until {
        let still = if args.recorded_asleep {
            Stillness::Asleep
        } else {
            Stillness::Unknown
        };
        for target in &targets {
            engine
                .advance(target, until, still)
                .context("moving the clock on")?;
        }
        reports.extend(engine.take_reports().context("collecting reports")?);
    }
    let mut triggered = Vec::new();
    match args.trigger_at {
        Some(at) => {
            for target in &targets {
                triggered.extend(engine.trigger(target, at).context("on-demand diagnosis")?);
            }
        }
        None => reports.extend(engine.finish().context("finishing the analysis")?),
    }
    let summary = summarize(args, &telemetry, events);
    let mut out = Vec::new();
    for target in &targets {
        let mine: Vec<Report> = reports
            .iter()
            .filter(|r| r.target == *target)
            .cloned()
            .collect();
        let timeline = mine.iter().map(timeline_entry).collect();
        let anomalies = anomalies(&mine);
        let diagnosis = triggered
            .iter()
            .find(|r| r.target == *target)
            .cloned()
            .or_else(|| anomalies.first().map(|a| a.diagnosis.clone()))
            .or_else(|| mine.last().cloned());
        let Some(diagnosis) = diagnosis else { continue };
        out.push(TargetAnalysis {
            diagnosis,
            timeline,
            anomalies,
            input: summary.clone(),
        });
    }
    if out.is_empty() {
        anyhow::bail!(
            "no report: {} events routed from {} ({} received, {} decode errors) — is the trace empty, or does --target match no process?",
            summary.events_routed,
            summary.input,
            summary.events_received,
            summary.decode_errors
        );
    }
    Ok(out)
}

fn summarize(args: &AnalyzeArgs, telemetry: &Telemetry, events: u64) -> InputSummary {
    let mut s = InputSummary {
        input: format!(
            "{:?}:{}",
            args.offline.input.kind,
            args.offline.input.path.display()
        )
        .to_lowercase(),
        events_routed: events,
        ..InputSummary::default()
    };
    for src in telemetry.sources() {
        s.events_received += src.received();
        s.decode_errors += src.decode_errors();
        s.events_dropped += DropReason::ALL.iter().map(|r| src.dropped(*r)).sum::<u64>();
    }
    s
}

fn timeline_entry(r: &Report) -> TimelineEntry {
    TimelineEntry {
        window_start_ns: r.window_start_ns,
        window_end_ns: r.window_end_ns,
        verdict: r.verdict,
        impact_factor: r.impact_factor,
    }
}

/// Groups consecutive anomalous reports into anomalies. A report whose onset is later
/// than the open anomaly's by more than α starts a new one: the engine re-anchored on a
/// new event (a real fault after a blip), which must not hide inside the blip's anomaly.
fn anomalies(reports: &[Report]) -> Vec<Anomaly> {
    let mut out: Vec<Anomaly> = Vec::new();
    let mut counts = [0u64; 2];
    let mut open = false;
    for r in reports {
        let idx = match r.verdict {
            Verdict::External => 0,
            Verdict::Internal => 1,
            Verdict::None => {
                open = false;
                continue;
            }
        };
        if open && new_onset(out.last().map(|a| &a.diagnosis), r) {
            open = false;
        }
        if !open {
            counts = [0, 0];
            out.push(Anomaly {
                detected_at_ns: r.window_end_ns,
                last_seen_ns: r.window_end_ns,
                verdict: r.verdict,
                reports: 0,
                diagnosis: r.clone(),
            });
            open = true;
        }
        counts[idx] += 1;
        if let Some(a) = out.last_mut() {
            a.last_seen_ns = r.window_end_ns;
            a.reports += 1;
            a.verdict = match counts[0].cmp(&counts[1]) {
                std::cmp::Ordering::Greater => Verdict::External,
                std::cmp::Ordering::Less => Verdict::Internal,
                std::cmp::Ordering::Equal => a.diagnosis.verdict,
            };
        }
    }
    out
}

/// Whether `r` is anchored on an onset more than α after the one `first` diagnosed.
fn new_onset(first: Option<&Report>, r: &Report) -> bool {
    let alpha_ns = (r.parameters.alpha_seconds * 1e9) as u64;
    match (first.and_then(|f| f.anomaly_onset_ns), r.anomaly_onset_ns) {
        (Some(a), Some(b)) => b > a.saturating_add(alpha_ns),
        _ => false,
    }
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

fn ranked(list: &[RankedSyscall]) -> String {
    if list.is_empty() {
        return "—".into();
    }
    list.iter()
        .map(|r| format!("{} {:+.0}%", r.syscall, r.increase_ratio * 100.0))
        .collect::<Vec<_>>()
        .join(", ")
}

fn render_text(t: &TargetAnalysis, out: &mut String) {
    let d = &t.diagnosis;
    let _ = writeln!(
        out,
        "target {} — {} events routed ({} received, {} decode errors, {} dropped) from {}",
        d.target,
        t.input.events_routed,
        t.input.events_received,
        t.input.decode_errors,
        t.input.events_dropped,
        t.input.input
    );
    let _ = writeln!(out, "verdict timeline (window end, trace clock):");
    let mut last: Option<Verdict> = None;
    for e in &t.timeline {
        if last != Some(e.verdict) {
            let _ = writeln!(
                out,
                "  {:>14.3} s  {:<8}  τ={:.2}",
                secs(e.window_end_ns),
                e.verdict.as_str(),
                e.impact_factor
            );
            last = Some(e.verdict);
        }
    }
    if t.anomalies.is_empty() {
        let _ = writeln!(out, "no anomaly detected");
    }
    for (i, a) in t.anomalies.iter().enumerate() {
        let _ = writeln!(
            out,
            "anomaly {}: detected at {:.3} s, last seen {:.3} s, {} ({} reports)",
            i + 1,
            secs(a.detected_at_ns),
            secs(a.last_seen_ns),
            a.verdict.as_str(),
            a.reports
        );
        render_diagnosis(&a.diagnosis, out);
    }
    if d.trigger == faultline_engine::report::Trigger::OnDemand {
        let _ = writeln!(
            out,
            "diagnosis at the trigger time {:.3} s:",
            secs(d.window_end_ns)
        );
        render_diagnosis(d, out);
    }
}

fn render_diagnosis(d: &Report, out: &mut String) {
    let onset = d
        .anomaly_onset_ns
        .map(|o| format!("{:.3} s", secs(o)))
        .unwrap_or_else(|| "—".into());
    let _ = writeln!(
        out,
        "  verdict      {} (decided by {:?})",
        d.verdict.as_str(),
        d.decided_by
    );
    let _ = writeln!(
        out,
        "  window       {:.3} s – {:.3} s, anomaly onset {onset}",
        secs(d.window_start_ns),
        secs(d.window_end_ns)
    );
    let _ = writeln!(
        out,
        "  impact τ     {:.3}{} ({} of {} active threads directly affected, {} affected)",
        d.impact_factor,
        d.impact_factor_filtered
            .map(|f| format!(" (I/O-filtered {f:.3})"))
            .unwrap_or_default(),
        d.threads.directly_affected,
        d.active_threads,
        d.threads.affected
    );
    let _ = writeln!(
        out,
        "  dispersion Ω {:.3} s (onset p50 {:.3} s, p90 {:.3} s, max {:.3} s)",
        d.onset_dispersion_seconds,
        d.onset_times_seconds.p50,
        d.onset_times_seconds.p90,
        d.onset_times_seconds.max
    );
    if let Some((p50, max)) = d.time_lost() {
        let _ = writeln!(
            out,
            "  time lost    p50 {:.1} %, max {:.1} % of an affected thread's time \
             (in the {} s after its onset)",
            p50 * 100.0,
            max * 100.0,
            d.parameters.persistence_seconds
        );
    }
    let _ = writeln!(out, "  by time      {}", ranked(&d.top_syscalls_by_time));
    let _ = writeln!(
        out,
        "  by frequency {}",
        ranked(&d.top_syscalls_by_frequency)
    );
    let _ = writeln!(out, "  subsystem    {}", d.subsystem.as_str());
    let _ = writeln!(out, "  hint         {}", d.hint);
}

#[cfg(test)]
mod tests {
    use super::*;
    use faultline_engine::synth::{generate, FaultSpec, StreamSpec};
    use faultline_engine::{Engine, Params, SyscallEvent};

    #[test]
    fn a_diagnosis_says_what_the_fault_cost_its_threads() {
        let spec = StreamSpec {
            threads: 16,
            syscall_types: 12,
            seconds: 50.0,
            calls_per_thread_per_second: 200.0,
            fault: Some(FaultSpec {
                start_seconds: 40.0,
                affected_fraction: 1.0,
                onset_spread_seconds: 0.05,
                duration_multiplier: 8.0,
                ..FaultSpec::default()
            }),
            ..StreamSpec::default()
        };
        let events: Vec<SyscallEvent> = generate(&spec).collect();
        let mut engine = Engine::new(Params::default()).expect("valid");
        engine.ingest("svc", &events);
        let r = engine
            .trigger("svc", spec.start_ns + 40_000_000_000)
            .expect("report");
        let (p50, max) = r.time_lost().expect("affected threads");
        assert!(0.0 < p50 && p50 <= max && max <= 1.0, "{p50} {max}");
        let mut out = String::new();
        render_diagnosis(&r, &mut out);
        let line = format!(
            "  time lost    p50 {:.1} %, max {:.1} %",
            p50 * 100.0,
            max * 100.0
        );
        assert!(out.contains(&line), "{out}");
        // Nothing affected, nothing lost: no line.
        let quiet = Report {
            affected_threads: Vec::new(),
            ..r
        };
        out.clear();
        render_diagnosis(&quiet, &mut out);
        assert!(!out.contains("time lost"), "{out}");
    }
}
