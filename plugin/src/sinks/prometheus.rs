//! The Prometheus sink: keeps the latest numbers of each target and encodes them, plus the
//! pipeline's counters, as OpenMetrics text on every scrape of `/metrics`.
//!
//! Per-target series are rebuilt from the latest report at scrape time, so a syscall
//! that leaves the top-N ranking disappears with it (no stale series), and both the
//! number of targets and of syscalls per target are capped (cuts counted in
//! `faultline_series_capped_total`). Every metric is documented in docs/metrics.md.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use faultline_engine::report::{EngineCounters, SyscallActivity, ThreadCounts, Trigger};
use faultline_engine::{Report, Subsystem, Verdict};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use tokio::sync::mpsc::WeakSender;

use super::names::{self, thread_states};
use crate::config::PrometheusSinkConfig;
use crate::model::EventBatch;
use crate::pipeline::latest::LatestReports;
use crate::pipeline::report_sink::{ReportSink, SinkError};
use crate::pipeline::telemetry::{DropReason, OtlpSignal, SourceRun, Telemetry, TrapReason};

/// The OpenMetrics content type Prometheus negotiates for.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Longest hint exported as a label; the full text is in `/report`.
pub use super::names::MAX_HINT_CHARS;

const TRIGGERS: [(Trigger, &str); 3] = [
    (Trigger::Cadence, "cadence"),
    (Trigger::OnDemand, "on_demand"),
    (Trigger::EndOfStream, "end_of_stream"),
];

/// The numbers of one target's latest report that become series, already capped.
#[derive(Debug, Clone)]
struct TargetSeries {
    impact_factor: f64,
    impact_factor_filtered: Option<f64>,
    onset_dispersion_seconds: f64,
    /// Median lost share of the affected threads (none listed: no series).
    time_lost: Option<f64>,
    verdict: Verdict,
    subsystem: Subsystem,
    /// The report's hint, cut to [`MAX_HINT_CHARS`] (it becomes a label value).
    hint: String,
    threads: ThreadCounts,
    /// The report's `active_threads`: τ's denominator (the `active` thread state).
    active_threads: u64,
    /// (dimension, rank starting at 1 as a label value, syscall, increase ratio)
    ranked: Vec<(&'static str, String, String, f64)>,
    syscalls: Vec<SyscallActivity>,
    anomaly_onset_seconds: Option<f64>,
    last_report_unix_seconds: f64,
    /// Seconds from the target's latest record to the report's window end.
    silent_seconds: f64,
    reports_by_trigger: [u64; 3],
    /// (`sign`, value) of the report's measured vital signs; empty without counters.
    vital_signs: Vec<(&'static str, f64)>,
    /// The target's symptoms (a subset of the three in [`names::SYMPTOMS`]).
    symptoms: Vec<&'static str>,
    /// (`symptom`, listed threads showing it), for symptoms at least one thread shows.
    symptom_threads: Vec<(&'static str, u64)>,
}

#[derive(Debug, Default)]
struct SeriesState {
    targets: BTreeMap<String, TargetSeries>,
    engine: EngineCounters,
}

/// Shared between the sink (writer, engine thread) and the exporter (reader, HTTP).
#[derive(Debug)]
struct Shared {
    state: Mutex<SeriesState>,
    /// The engine queue, observed without keeping it open (see [`PrometheusExporter::watch_queue`]).
    queue: Mutex<Option<WeakSender<EventBatch>>>,
    /// The `/report` store, whose refused reports are exported (see
    /// [`PrometheusExporter::watch_report_store`]).
    report_store: Mutex<Option<Arc<LatestReports>>>,
    telemetry: Arc<Telemetry>,
    series_capped: Counter,
    max_targets: usize,
    max_syscalls: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, SeriesState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Encodes `/metrics`; cheap to share between HTTP handlers.
#[derive(Debug)]
pub struct PrometheusExporter {
    registry: Registry,
    shared: Arc<Shared>,
}

impl PrometheusExporter {
    /// Live captures that stopped reading although nobody stopped them (for `/healthz`).
    pub fn sources_down(&self) -> Vec<&'static str> {
        self.shared
            .telemetry
            .live_sources()
            .iter()
            .filter(|s| s.is_down())
            .map(|s| s.name)
            .collect()
    }

    /// Whether the engine is a WASM guest that is not running (a failed restart backing
    /// off), for `/healthz`.
    pub fn guest_unavailable(&self) -> bool {
        self.shared.telemetry.guest_unavailable()
    }

    /// Exports the engine queue's fill level; a weak handle, so scrapes never keep the
    /// queue open during shutdown.
    pub fn watch_queue(&self, queue: WeakSender<EventBatch>) {
        *self.shared.queue.lock().unwrap_or_else(|e| e.into_inner()) = Some(queue);
    }

    /// Exports how many reports the `/report` store refused because it was full
    /// (`faultline_report_store_capped_total`).
    pub fn watch_report_store(&self, store: Arc<LatestReports>) {
        *self
            .shared
            .report_store
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(store);
    }

    /// The OpenMetrics text of every faultline metric (ends with `# EOF`).
    pub fn encode(&self) -> Result<String, fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// The engine thread's side: turns reports into series state.
#[derive(Debug)]
pub struct PrometheusSink {
    shared: Arc<Shared>,
    analysis_duration: Histogram,
}

/// A sink and the exporter that reads what it writes (plus `telemetry`'s counters).
pub fn new(
    cfg: &PrometheusSinkConfig,
    telemetry: Arc<Telemetry>,
) -> (PrometheusSink, Arc<PrometheusExporter>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(SeriesState::default()),
        queue: Mutex::new(None),
        report_store: Mutex::new(None),
        telemetry,
        series_capped: Counter::default(),
        max_targets: cfg.max_targets.max(1),
        max_syscalls: cfg.max_syscalls.max(1),
    });
    // 10 µs … ~2.6 s: a native batch takes microseconds, a WASM evaluation milliseconds.
    let analysis_duration = Histogram::new(exponential_buckets(1e-5, 4.0, 10));
    let mut registry = Registry::default();
    registry.register(
        "faultline_analysis_duration_seconds",
        "Wall-clock time of one engine call (ingest+take_reports, trigger or finish)",
        analysis_duration.clone(),
    );
    registry.register(
        names::SERIES_CAPPED,
        "Series or reports not exported because a cap (targets, syscalls per target) was reached",
        shared.series_capped.clone(),
    );
    registry.register_collector(Box::new(SeriesCollector(shared.clone())));
    (
        PrometheusSink {
            shared: shared.clone(),
            analysis_duration,
        },
        Arc::new(PrometheusExporter { registry, shared }),
    )
}

impl PrometheusSink {
    fn series_of(&self, r: &Report, previous: Option<&TargetSeries>) -> TargetSeries {
        let cap = self.shared.max_syscalls;
        let mut cut = 0usize;
        let mut ranked = Vec::new();
        for (dimension, list) in [
            ("time", &r.top_syscalls_by_time),
            ("frequency", &r.top_syscalls_by_frequency),
        ] {
            cut += list.len().saturating_sub(cap);
            ranked.extend(list.iter().take(cap).enumerate().map(|(i, s)| {
                (
                    dimension,
                    (i + 1).to_string(),
                    s.syscall.clone(),
                    s.increase_ratio,
                )
            }));
        }
        cut += r.syscalls.len().saturating_sub(cap);
        if cut > 0 {
            self.shared.series_capped.inc_by(cut as u64);
        }
        let mut reports_by_trigger = previous.map_or([0; 3], |p| p.reports_by_trigger);
        if let Some(i) = TRIGGERS.iter().position(|(t, _)| *t == r.trigger) {
            reports_by_trigger[i] += 1;
        }
        let vs = r.vital_signs.as_ref();
        TargetSeries {
            impact_factor: r.impact_factor,
            impact_factor_filtered: r.impact_factor_filtered,
            onset_dispersion_seconds: r.onset_dispersion_seconds,
            time_lost: r.time_lost().map(|(p50, _)| p50),
            verdict: r.verdict,
            subsystem: r.subsystem,
            hint: names::hint_label(&r.hint),
            threads: r.threads,
            active_threads: r.active_threads,
            ranked,
            syscalls: r.syscalls.iter().take(cap).cloned().collect(),
            anomaly_onset_seconds: r.anomaly_onset_ns.map(|ns| ns as f64 / 1e9),
            last_report_unix_seconds: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            silent_seconds: r.silent_seconds,
            reports_by_trigger,
            vital_signs: vs.map(|v| names::vital_signs(&v.rates)).unwrap_or_default(),
            symptoms: vs.map(names::target_symptoms).unwrap_or_default(),
            symptom_threads: names::symptom_thread_counts(vs),
        }
    }
}

impl ReportSink for PrometheusSink {
    fn name(&self) -> &'static str {
        "prometheus"
    }

    fn publish(&mut self, report: &Report) -> Result<(), SinkError> {
        let mut st = self.shared.lock();
        let known = st.targets.contains_key(&report.target);
        if !known && st.targets.len() >= self.shared.max_targets {
            drop(st);
            self.shared.series_capped.inc();
            return Ok(());
        }
        let series = self.series_of(report, st.targets.get(&report.target));
        st.targets.insert(report.target.clone(), series);
        Ok(())
    }

    fn observe_engine_call(&mut self, seconds: f64) {
        self.analysis_duration.observe(seconds);
    }

    fn observe_engine_counters(&mut self, counters: &EngineCounters) {
        self.shared.lock().engine = *counters;
    }

    fn forget(&mut self, target: &str) {
        self.shared.lock().targets.remove(target);
    }
}

/// Encodes the per-target and pipeline series on each scrape.
#[derive(Debug)]
struct SeriesCollector(Arc<Shared>);

type Labels<'a> = Vec<(&'static str, &'a str)>;

fn gauges<'a>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (Labels<'a>, f64)>,
) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in rows {
        ConstGauge::new(v).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A gauge without labels (`name value`, not `name{} value`).
fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> fmt::Result {
    ConstGauge::new(v).encode(enc.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

/// A counter without labels.
fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> fmt::Result {
    ConstCounter::new(v).encode(enc.encode_descriptor(name, help, None, MetricType::Counter)?)
}

/// `name` without `_total`: the encoder appends it to counter samples.
fn counters<'a>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (Labels<'a>, u64)>,
) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in rows {
        ConstCounter::new(v).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

impl Collector for SeriesCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let shared = &self.0;
        // Copy out under the lock, encode without it: scrapes must not stall the engine.
        let (targets, engine) = {
            let st = shared.lock();
            (st.targets.clone(), st.engine)
        };
        let t = &targets;
        let per = |f: fn(&TargetSeries) -> Option<f64>| {
            t.iter()
                .filter_map(move |(n, s)| f(s).map(|v| (vec![("target", n.as_str())], v)))
        };
        gauges(
            &mut enc,
            names::BUILD_INFO,
            "Constant 1, labelled with the running version",
            [(vec![("version", env!("CARGO_PKG_VERSION"))], 1.0)],
        )?;
        gauge(
            &mut enc,
            names::TARGETS,
            "Targets with exported series",
            t.len() as f64,
        )?;
        gauges(
            &mut enc,
            names::IMPACT_FACTOR,
            "PerfCompass impact factor τ: directly affected threads / active threads in the last report",
            per(|s| Some(s.impact_factor)),
        )?;
        gauges(
            &mut enc,
            names::IMPACT_FACTOR_FILTERED,
            "τ recomputed on I/O syscalls only (present when filtering mode ran)",
            per(|s| s.impact_factor_filtered),
        )?;
        gauges(
            &mut enc,
            names::ONSET_DISPERSION,
            "Onset dispersion Ω: standard deviation of fault onset times over affected threads",
            per(|s| Some(s.onset_dispersion_seconds)),
        )?;
        gauges(
            &mut enc,
            names::TIME_LOST,
            "Median share of their time the affected threads lost to slower calls and longer gaps, in the persistence window after their onsets (absent without affected threads)",
            per(|s| s.time_lost),
        )?;
        gauges(
            &mut enc,
            names::ANOMALY_ONSET,
            "Estimated anomaly start, in the trace clock (Unix time for OTLP sources)",
            per(|s| s.anomaly_onset_seconds),
        )?;
        gauges(
            &mut enc,
            names::LAST_REPORT,
            "Unix time at which the target's last report was received from the engine",
            per(|s| Some(s.last_report_unix_seconds)),
        )?;
        gauges(
            &mut enc,
            names::SILENT,
            "Seconds the target had made no system call at the end of its last report's window: 0 while it works; grows while it is frozen or hung (live perf/LTTng captures only)",
            per(|s| Some(s.silent_seconds)),
        )?;
        gauges(
            &mut enc,
            names::VERDICT,
            "State set: 1 for the target's current verdict (external, internal, none), 0 otherwise",
            t.iter().flat_map(|(n, s)| {
                Verdict::ALL.into_iter().map(move |v| {
                    (
                        vec![("target", n.as_str()), ("verdict", v.as_str())],
                        f64::from(u8::from(v == s.verdict)),
                    )
                })
            }),
        )?;
        gauges(
            &mut enc,
            names::SUBSYSTEM,
            "State set: 1 for the kernel subsystem the last report's ranking points at",
            t.iter().flat_map(|(n, s)| {
                Subsystem::ALL.into_iter().map(move |v| {
                    (
                        vec![("target", n.as_str()), ("subsystem", v.as_str())],
                        f64::from(u8::from(v == s.subsystem)),
                    )
                })
            }),
        )?;
        gauges(
            &mut enc,
            names::DIAGNOSIS_INFO,
            "Constant 1 per target, labelled with the last report's verdict, subsystem and hint",
            t.iter().map(|(n, s)| {
                (
                    vec![
                        ("target", n.as_str()),
                        ("verdict", s.verdict.as_str()),
                        ("subsystem", s.subsystem.as_str()),
                        ("hint", s.hint.as_str()),
                    ],
                    1.0,
                )
            }),
        )?;
        gauges(
            &mut enc,
            names::THREADS,
            "Threads in the last report's window: total, active (τ's denominator), affected, directly_affected",
            t.iter().flat_map(|(n, s)| {
                thread_states(&s.threads, s.active_threads)
                    .into_iter()
                    .map(move |(state, v)| {
                        (
                            vec![("target", n.as_str()), (names::THREAD_STATE_LABEL, state)],
                            v as f64,
                        )
                    })
            }),
        )?;
        gauges(
            &mut enc,
            names::AFFECTED_SYSCALL_INCREASE,
            "Top-N affected syscalls: relative increase over baseline (0.5 = +50%) by time or frequency",
            t.iter().flat_map(|(n, s)| {
                s.ranked.iter().map(move |(dim, rank, sc, v)| {
                    (
                        vec![
                            ("target", n.as_str()),
                            ("syscall", sc.as_str()),
                            ("dimension", *dim),
                            ("rank", rank.as_str()),
                        ],
                        *v,
                    )
                })
            }),
        )?;
        gauges(
            &mut enc,
            names::SYSCALL_MEAN_LATENCY,
            "Mean execution time of the target's busiest syscalls in the last report's window",
            t.iter().flat_map(|(n, s)| {
                s.syscalls.iter().map(move |a| {
                    (
                        vec![("target", n.as_str()), ("syscall", a.syscall.as_str())],
                        a.mean_latency_seconds,
                    )
                })
            }),
        )?;
        gauges(
            &mut enc,
            names::SYSCALL_CALLS_PER_SECOND,
            "Call rate of the target's busiest syscalls over the last report's window",
            t.iter().flat_map(|(n, s)| {
                s.syscalls.iter().map(move |a| {
                    (
                        vec![("target", n.as_str()), ("syscall", a.syscall.as_str())],
                        a.calls_per_second,
                    )
                })
            }),
        )?;
        gauges(
            &mut enc,
            names::VITAL_SIGN,
            "Hardware-counter ratios of the target over the last report's window (cycles_per_ns, ipc, mpki, calls_per_mcycle, switches_per_call); only when its source delivers counters",
            t.iter().flat_map(|(n, s)| {
                s.vital_signs.iter().map(move |(sign, v)| {
                    (vec![("target", n.as_str()), ("sign", *sign)], *v)
                })
            }),
        )?;
        gauges(
            &mut enc,
            names::SYMPTOM,
            "1 for each ChopStix symptom the target's counters show in the last report (busy_loop, syscall_loop, cache_thrash)",
            t.iter().flat_map(|(n, s)| {
                s.symptoms
                    .iter()
                    .map(move |sym| (vec![("target", n.as_str()), ("symptom", *sym)], 1.0))
            }),
        )?;
        gauges(
            &mut enc,
            names::SYMPTOM_THREADS,
            "Threads of the target whose own counters show the symptom (of the at most 8 the last report lists)",
            t.iter().flat_map(|(n, s)| {
                s.symptom_threads.iter().map(move |(sym, k)| {
                    (vec![("target", n.as_str()), ("symptom", *sym)], *k as f64)
                })
            }),
        )?;
        counters(
            &mut enc,
            names::REPORTS,
            "Reports received from the engine, by what triggered them",
            t.iter().flat_map(|(n, s)| {
                TRIGGERS
                    .iter()
                    .zip(s.reports_by_trigger)
                    .map(move |((_, trig), v)| {
                        (vec![("target", n.as_str()), ("trigger", *trig)], v)
                    })
            }),
        )?;
        let queue = shared
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(WeakSender::upgrade)
            .map(|q| (q.max_capacity() - q.capacity(), q.max_capacity()));
        if let Some((used, capacity)) = queue {
            gauge(
                &mut enc,
                "faultline_queue_batches",
                "Batches waiting in the engine queue (at pipeline.queue_capacity, push sources drop)",
                used as f64,
            )?;
            gauge(
                &mut enc,
                "faultline_queue_capacity_batches",
                "Capacity of the engine queue (pipeline.queue_capacity)",
                capacity as f64,
            )?;
        }
        let store_capped = shared
            .report_store
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|s| s.capped());
        if let Some(capped) = store_capped {
            counter(
                &mut enc,
                names::REPORT_STORE_CAPPED,
                "Reports GET /report does not show because analysis.max_targets targets already had one",
                capped,
            )?;
        }
        let sources = shared.telemetry.sources();
        counters(
            &mut enc,
            names::EVENTS_RECEIVED,
            "Syscall events decoded by each source",
            sources
                .iter()
                .map(|s| (vec![("source", s.name)], s.received())),
        )?;
        counters(
            &mut enc,
            names::EVENTS_DROPPED,
            "Events not analysed, by source and reason (queue_full, too_large, malformed, no_target, capped, not_syscall, kernel_lost, engine_error, engine_unavailable, quarantined)",
            sources.iter().flat_map(|s| {
                DropReason::ALL.into_iter().map(move |r| {
                    (
                        vec![("source", s.name), ("reason", r.as_str())],
                        s.dropped(r),
                    )
                })
            }),
        )?;
        counters(
            &mut enc,
            names::DECODE_ERRORS,
            "Input records a source could not decode (skipped)",
            sources
                .iter()
                .map(|s| (vec![("source", s.name)], s.decode_errors())),
        )?;
        for (name, help, tally) in names::OTLP_SEGMENT_TALLIES {
            let watched = sources.iter().filter(|s| s.segments().is_watched());
            counters(
                &mut enc,
                name,
                help,
                watched.map(|s| (vec![("source", s.name)], tally(&s.segments().get()))),
            )?;
        }
        counters(
            &mut enc,
            names::OTLP_EXPORT_FAILURES,
            "Exports of the OTLP push sink that failed (collector down or refusing, timeout) after the exporter's own retries, by signal; the next push repairs metrics, verdict records are kept and sent again",
            OtlpSignal::ALL.into_iter().map(|s| {
                (
                    vec![("signal", s.as_str())],
                    shared.telemetry.otlp_export_failures(s),
                )
            }),
        )?;
        gauge(
            &mut enc,
            names::OTLP_VERDICTS_PENDING,
            "Verdict records the OTLP collector refused, kept to be sent again (after the next successful export, or 5 s after a failure, then at most a minute apart)",
            shared.telemetry.otlp_verdicts_pending() as f64,
        )?;
        counter(
            &mut enc,
            names::OTLP_VERDICTS_LOST,
            "Verdict records never delivered to the OTLP collector: over the 1,024 kept for redelivery, or still refused at shutdown",
            shared.telemetry.otlp_verdicts_lost(),
        )?;
        gauge(
            &mut enc,
            names::ENGINE_UP,
            names::ENGINE_UP_HELP,
            f64::from(u8::from(shared.telemetry.engine_up())),
        )?;
        gauges(
            &mut enc,
            names::SOURCE_UP,
            "1 while a live capture (perf record, an LTTng live session) reads, 0 once it ended, failed or was stopped: at 0 while faultline runs, its targets are not watched",
            shared.telemetry.live_sources().iter().map(|s| {
                let up = f64::from(u8::from(s.run() == SourceRun::Running));
                (vec![("source", s.name)], up)
            }),
        )?;
        let (held, late, overflows) = shared.telemetry.reorder();
        gauge(
            &mut enc,
            names::REORDER_HELD,
            "OTLP records waiting until every active process of their target has sent past them ([pipeline] reorder_seconds)",
            held as f64,
        )?;
        counter(
            &mut enc,
            names::REORDER_LATE,
            "OTLP records fed behind a newer record of their target: they came later than the reorder wait allows (a process's first batch, a process lagging more than reorder_seconds)",
            late,
        )?;
        counter(
            &mut enc,
            names::REORDER_OVERFLOWS,
            "Times the OTLP reorder stage was full and fed the oldest records of the target holding most before their turn",
            overflows,
        )?;
        counter(
            &mut enc,
            names::TARGETS_EVICTED,
            names::TARGETS_EVICTED_HELP,
            shared.telemetry.targets_evicted(),
        )?;
        gauge(
            &mut enc,
            names::TARGETS_QUARANTINED,
            names::TARGETS_QUARANTINED_HELP,
            shared.telemetry.targets_quarantined() as f64,
        )?;
        counter(
            &mut enc,
            names::TARGET_QUARANTINES,
            names::TARGET_QUARANTINES_HELP,
            shared.telemetry.target_quarantines(),
        )?;
        counter(
            &mut enc,
            names::GUEST_RESTARTS,
            "Times the WASM engine was re-instantiated after a fault",
            shared.telemetry.guest_restarts(),
        )?;
        counter(
            &mut enc,
            names::GUEST_RESTART_FAILURES,
            names::GUEST_RESTART_FAILURES_HELP,
            shared.telemetry.guest_restart_failures(),
        )?;
        counters(
            &mut enc,
            names::GUEST_TRAPS,
            names::GUEST_TRAPS_HELP,
            TrapReason::ALL.into_iter().map(|r| {
                (
                    vec![("reason", r.as_str())],
                    shared.telemetry.guest_traps_by(r),
                )
            }),
        )?;
        if let Some(g) = shared.telemetry.guest() {
            gauge(
                &mut enc,
                names::GUEST_UP,
                names::GUEST_UP_HELP,
                f64::from(u8::from(g.up)),
            )?;
            gauge(
                &mut enc,
                names::GUEST_MEMORY,
                names::GUEST_MEMORY_HELP,
                g.memory_bytes as f64,
            )?;
            gauge(
                &mut enc,
                names::GUEST_MEMORY_LIMIT,
                names::GUEST_MEMORY_LIMIT_HELP,
                g.memory_limit_bytes as f64,
            )?;
        }
        counters(
            &mut enc,
            names::SINK_ERRORS,
            "Reports a sink failed to publish and flushes that failed, by sink (json, otlp, prometheus, report_store)",
            shared
                .telemetry
                .sink_errors()
                .into_iter()
                .map(|(sink, n)| (vec![("sink", sink)], n)),
        )?;
        counter(
            &mut enc,
            "faultline_engine_events",
            "Events the engine has ingested",
            engine.events,
        )?;
        counter(
            &mut enc,
            "faultline_engine_calls",
            "Completed syscalls the engine has analysed (after enter/exit pairing)",
            engine.calls,
        )?;
        counters(
            &mut enc,
            "faultline_engine_irregular_records",
            "Records the engine could not use as-is, by kind",
            [
                ("unmatched_exit", engine.unmatched_exits),
                ("lost_enter", engine.lost_enters),
                ("lost_exit", engine.lost_exits),
                ("duplicate", engine.duplicate_records),
                ("out_of_order", engine.out_of_order),
                ("across_loss", engine.pairs_across_loss),
                ("reserved_syscall_id", engine.reserved_syscall_ids),
                ("clock_outlier", engine.clock_outliers),
            ]
            .into_iter()
            .map(|(k, v)| (vec![("kind", k)], v)),
        )?;
        counter(
            &mut enc,
            "faultline_engine_untracked_calls",
            "Calls beyond the engine's per-thread syscall bound (counted, not tested)",
            engine.untracked_calls,
        )?;
        counter(
            &mut enc,
            "faultline_engine_evicted_threads",
            "Threads evicted because a target reached analysis.max_threads",
            engine.evicted_threads,
        )?;
        counter(
            &mut enc,
            "faultline_engine_dropped_targets",
            "Targets the engine refused because analysis.max_targets was reached",
            engine.dropped_targets,
        )?;
        counter(
            &mut enc,
            "faultline_engine_clock_resets",
            "Targets restarted because their events' clock jumped back by more than an hour",
            engine.clock_resets,
        )?;
        counter(
            &mut enc,
            "faultline_engine_counter_records",
            "Records whose hardware counters went into the vital signs (counters records, and calls carrying counters)",
            engine.counter_records,
        )?;
        counter(
            &mut enc,
            "faultline_engine_untracked_counter_records",
            "Counter records of threads past analysis.max_threads: in their target's totals, not in a thread's own",
            engine.untracked_counter_records,
        )?;
        counter(
            &mut enc,
            "faultline_engine_segment_records",
            "TCP segment records (a network namespace's segments sent and retransmitted) taken into their targets' packet-loss test",
            engine.segment_records,
        )?;
        counter(
            &mut enc,
            "faultline_engine_untargeted_segment_records",
            "TCP segment records of processes that made no call (no target of their own), left out",
            engine.untargeted_segment_records,
        )?;
        Ok(())
    }
}
