//! The OTLP push sink: the Prometheus sink's numbers as OTLP metrics, pushed on an interval
//! to a collector (gRPC or HTTP/protobuf), and every new external/internal verdict as an
//! OTLP log record, for sites that collect with an OpenTelemetry Collector instead of
//! scraping.
//!
//! Metrics are observable instruments read at export time from the latest report per
//! target (bounded by `max_targets`/`max_syscalls`, cuts counted) and from [`Telemetry`],
//! so publishing a report only swaps in-memory state; the SDK's own background workers do
//! the network I/O. Metric names and labels are the Prometheus sink's (the shared
//! [`super::names`], docs/metrics.md), without the `_total` suffix Prometheus adds to
//! counters.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use faultline_engine::report::{ThreadCounts, Trigger};
use faultline_engine::{Report, Subsystem, Verdict};
use opentelemetry::logs::{AnyValue, LogRecord, Logger, LoggerProvider, Severity};
use opentelemetry::metrics::{Meter, MeterProvider};
use opentelemetry::KeyValue;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{LogExporter, MetricExporter, Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::logs::{LogExporter as _, SdkLogger, SdkLoggerProvider};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::Resource;
use serde::{Deserialize, Serialize};

use super::names::{self, thread_states};
use super::otlp_failures::{Counted, ExportFailures};
use super::otlp_redelivery::{Redelivery, Undelivered};
use crate::pipeline::report_sink::{ReportSink, SinkError};
use crate::pipeline::telemetry::{DropReason, GuestGauges, Telemetry, TrapReason};

/// `trigger` label values of [`names::REPORTS`], as the Prometheus sink writes them.
const TRIGGERS: [(Trigger, &str); 3] = [
    (Trigger::Cadence, "cadence"),
    (Trigger::OnDemand, "on_demand"),
    (Trigger::EndOfStream, "end_of_stream"),
];

/// Wire protocol towards the collector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OtlpProtocol {
    /// OTLP/gRPC (port 4317 by convention).
    Grpc,
    /// OTLP/HTTP with binary protobuf bodies (port 4318 by convention).
    Http,
}

/// `[sinks.otlp]` (enabled by the runtime's `enabled` flag; off by default).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OtlpSinkConfig {
    /// Collector base URL, e.g. `http://collector:4317`; per-signal paths (`/v1/metrics`,
    /// `/v1/logs`) are added for HTTP. Default: loopback at the protocol's standard port.
    pub endpoint: Option<String>,
    pub protocol: OtlpProtocol,
    /// How often metrics are pushed.
    pub interval_seconds: u64,
    /// Per-export timeout.
    pub timeout_seconds: u64,
    /// `service.name` of faultline's own resource.
    pub service_name: String,
    /// Targets that get per-target metrics; further targets are counted in
    /// `faultline_series_capped`.
    pub max_targets: usize,
    /// Syscalls exported per target and per list (ranking, latency/rate).
    pub max_syscalls: usize,
    /// Emit a log record per new external/internal verdict.
    pub verdict_logs: bool,
}

impl Default for OtlpSinkConfig {
    fn default() -> Self {
        Self {
            endpoint: None,
            protocol: OtlpProtocol::Grpc,
            interval_seconds: 10,
            timeout_seconds: 10,
            service_name: "faultline".into(),
            max_targets: 64,
            max_syscalls: 20,
            verdict_logs: true,
        }
    }
}

impl OtlpSinkConfig {
    /// The configured endpoint, or loopback at the protocol's standard port.
    pub fn endpoint(&self) -> String {
        match (&self.endpoint, self.protocol) {
            (Some(e), _) => e.trim_end_matches('/').to_string(),
            (None, OtlpProtocol::Grpc) => "http://127.0.0.1:4317".into(),
            (None, OtlpProtocol::Http) => "http://127.0.0.1:4318".into(),
        }
    }
}

/// The sink could not be built (bad endpoint, no Tokio runtime).
#[derive(Debug, thiserror::Error)]
pub enum OtlpSinkError {
    #[error("OTLP sink: {0}")]
    Build(String),
}

/// The numbers of one target's latest report that become metrics, already capped.
#[derive(Clone, Debug)]
struct TargetSnapshot {
    impact_factor: f64,
    impact_factor_filtered: Option<f64>,
    onset_dispersion_seconds: f64,
    /// Median lost share of the affected threads (none listed: no point).
    time_lost: Option<f64>,
    anomaly_onset_seconds: Option<f64>,
    /// Unix time (wall clock) at which the report was published to this sink.
    last_report_unix_seconds: f64,
    /// Seconds from the target's latest record to the report's window end.
    silent_seconds: f64,
    verdict: Verdict,
    subsystem: Subsystem,
    /// The report's hint cut to [`names::MAX_HINT_CHARS`] (a label value).
    hint: String,
    threads: ThreadCounts,
    /// The report's `active_threads`: τ's denominator (the `active` thread state).
    active_threads: u64,
    /// (dimension, rank, syscall, increase ratio).
    ranked: Vec<(&'static str, String, String, f64)>,
    /// (syscall, calls per second, mean latency seconds).
    syscalls: Vec<(String, f64, f64)>,
    /// Reports so far, per [`TRIGGERS`] entry.
    reports_by_trigger: [u64; 3],
    /// (`sign`, value) of the report's measured vital signs; empty without counters.
    vital_signs: Vec<(&'static str, f64)>,
    /// The target's symptoms.
    symptoms: Vec<&'static str>,
    /// (`symptom`, listed threads showing it), for symptoms at least one thread shows.
    symptom_threads: Vec<(&'static str, u64)>,
}

#[derive(Debug, Default)]
struct SinkState {
    targets: BTreeMap<String, TargetSnapshot>,
    /// Reports of targets beyond `max_targets` (not exported).
    capped: u64,
    verdict_logs: u64,
}

fn lock(state: &Mutex<SinkState>) -> MutexGuard<'_, SinkState> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs HTTP exports on the Tokio runtime: the SDK's exporters are driven from its own
/// threads, where the async `reqwest` client (no reactor there) cannot run by itself.
#[derive(Clone, Debug)]
struct TokioHttpClient {
    client: reqwest::Client,
    handle: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for TokioHttpClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        self.handle
            .spawn(async move { client.send_bytes(request).await })
            .await
            .map_err(|e| Box::new(e) as HttpError)?
    }
}

/// The time shutdown gives the verdict records the collector refused before (5 s, the
/// OpenTelemetry SDK's own shutdown limit for the final push).
const FINAL_REDELIVERY: Duration = Duration::from_secs(5);

/// A running OTLP push sink.
#[derive(Debug)]
pub struct OtlpSink {
    cfg: OtlpSinkConfig,
    state: Arc<Mutex<SinkState>>,
    meters: SdkMeterProvider,
    loggers: SdkLoggerProvider,
    logger: SdkLogger,
    /// Verdict records the collector refused, kept for another try.
    undelivered: Undelivered<Counted<LogExporter>>,
    redelivery_timer: Timer,
}

/// The redelivery timer's task; stopped when dropped (a sink dropped without `shutdown`).
#[derive(Debug)]
struct Timer(tokio::task::JoinHandle<()>);

impl Timer {
    /// Stops the task and waits until it is gone, so that records it had taken for a
    /// redelivery are back in the queue.
    async fn stop(mut self) {
        self.0.abort();
        let _ = (&mut self.0).await;
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl OtlpSink {
    /// Builds the exporters and starts pushing as host `host` (its resource's `host.name`).
    /// Must be called inside a Tokio runtime (the gRPC channel and the HTTP client live on
    /// it).
    pub fn start(
        cfg: OtlpSinkConfig,
        host: String,
        telemetry: Arc<Telemetry>,
    ) -> Result<Self, OtlpSinkError> {
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|e| OtlpSinkError::Build(format!("needs a Tokio runtime: {e}")))?;
        let endpoint = cfg.endpoint();
        let timeout = Duration::from_secs(cfg.timeout_seconds.max(1));
        let build_err = |what: &str, e: &dyn std::fmt::Display| {
            OtlpSinkError::Build(format!("{what} exporter for {endpoint}: {e}"))
        };
        let (metric_exporter, log_exporter) = match cfg.protocol {
            OtlpProtocol::Grpc => (
                MetricExporter::builder()
                    .with_tonic()
                    .with_endpoint(endpoint.clone())
                    .with_timeout(timeout)
                    .build()
                    .map_err(|e| build_err("metric", &e))?,
                LogExporter::builder()
                    .with_tonic()
                    .with_endpoint(endpoint.clone())
                    .with_timeout(timeout)
                    .build()
                    .map_err(|e| build_err("log", &e))?,
            ),
            OtlpProtocol::Http => {
                let client = TokioHttpClient {
                    client: reqwest::Client::builder()
                        .timeout(timeout)
                        .build()
                        .map_err(|e| build_err("HTTP", &e))?,
                    handle,
                };
                (
                    MetricExporter::builder()
                        .with_http()
                        .with_http_client(client.clone())
                        .with_protocol(Protocol::HttpBinary)
                        .with_endpoint(format!("{endpoint}/v1/metrics"))
                        .with_timeout(timeout)
                        .build()
                        .map_err(|e| build_err("metric", &e))?,
                    LogExporter::builder()
                        .with_http()
                        .with_http_client(client)
                        .with_protocol(Protocol::HttpBinary)
                        .with_endpoint(format!("{endpoint}/v1/logs"))
                        .with_timeout(timeout)
                        .build()
                        .map_err(|e| build_err("log", &e))?,
                )
            }
        };
        // Every faultline pushes under the same service.name: the host tells them apart in
        // the backend (the Collector's Prometheus exporters make `instance` of
        // service.instance.id), or N hosts' series would collide in one.
        let resource = Resource::builder()
            .with_service_name(cfg.service_name.clone())
            .with_attributes([
                KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
                KeyValue::new("service.instance.id", host.clone()),
                KeyValue::new("host.name", host),
            ])
            .build();
        // Failed exports are counted (the SDK's exporters retry for a few seconds, then give
        // up silently); verdict records of a failed export are kept and sent again.
        let failures = Arc::new(ExportFailures::new(telemetry.clone()));
        let metric_exporter = Counted::new(metric_exporter, failures.clone());
        let mut log_exporter = Counted::new(log_exporter, failures);
        log_exporter.set_resource(&resource);
        let log_exporter = Redelivery::new(log_exporter, telemetry.clone());
        let undelivered = log_exporter.undelivered();
        let redelivery_timer = Timer(tokio::spawn(log_exporter.handle().run()));
        let reader = PeriodicReader::builder(metric_exporter)
            .with_interval(Duration::from_secs(cfg.interval_seconds.max(1)))
            .build();
        let meters = SdkMeterProvider::builder()
            .with_resource(resource.clone())
            .with_reader(reader)
            .build();
        let loggers = SdkLoggerProvider::builder()
            .with_resource(resource)
            .with_batch_exporter(log_exporter)
            .build();
        let logger = loggers.logger("faultline");
        let state = Arc::new(Mutex::new(SinkState::default()));
        register_instruments(&meters.meter("faultline"), &state, &telemetry);
        Ok(Self {
            cfg,
            state,
            meters,
            loggers,
            logger,
            undelivered,
            redelivery_timer,
        })
    }

    /// Takes a new report: swaps the target's numbers and logs the verdict if it changed
    /// to external or internal. Cheap (no I/O), so it can run on the engine thread.
    pub fn publish(&self, report: &Report) {
        let changed = {
            let mut st = lock(&self.state);
            let known = st.targets.contains_key(&report.target);
            if !known && st.targets.len() >= self.cfg.max_targets {
                st.capped += 1;
                return;
            }
            let previous = st.targets.get(&report.target).map(|t| t.verdict);
            let mut reports = st
                .targets
                .get(&report.target)
                .map_or([0; 3], |t| t.reports_by_trigger);
            if let Some(i) = TRIGGERS.iter().position(|(t, _)| *t == report.trigger) {
                reports[i] += 1;
            }
            let snapshot = snapshot(report, self.cfg.max_syscalls, reports);
            st.targets.insert(report.target.clone(), snapshot);
            let changed = report.verdict != Verdict::None && previous != Some(report.verdict);
            if changed && self.cfg.verdict_logs {
                st.verdict_logs += 1;
            }
            changed
        };
        if changed && self.cfg.verdict_logs {
            self.emit_verdict(report);
        }
    }

    fn emit_verdict(&self, report: &Report) {
        let mut rec = self.logger.create_log_record();
        rec.set_event_name("faultline.verdict");
        rec.set_timestamp(SystemTime::now());
        rec.set_observed_timestamp(SystemTime::now());
        rec.set_severity_number(Severity::Warn);
        rec.set_severity_text("WARN");
        rec.set_body(AnyValue::from(report.hint.clone()));
        let text = |v: serde_json::Result<serde_json::Value>| {
            v.ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        };
        let i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        rec.add_attributes([
            ("faultline.target", AnyValue::from(report.target.clone())),
            ("faultline.verdict", AnyValue::from(report.verdict.as_str())),
            (
                "faultline.decided_by",
                AnyValue::from(text(serde_json::to_value(report.decided_by))),
            ),
            (
                "faultline.trigger",
                AnyValue::from(text(serde_json::to_value(report.trigger))),
            ),
            (
                "faultline.impact_factor",
                AnyValue::from(report.impact_factor),
            ),
            (
                "faultline.onset_dispersion_seconds",
                AnyValue::from(report.onset_dispersion_seconds),
            ),
            (
                "faultline.silent_seconds",
                AnyValue::from(report.silent_seconds),
            ),
            (
                "faultline.threads.total",
                AnyValue::from(i(report.threads.total)),
            ),
            (
                "faultline.threads.affected",
                AnyValue::from(i(report.threads.affected)),
            ),
            (
                "faultline.threads.directly_affected",
                AnyValue::from(i(report.threads.directly_affected)),
            ),
            (
                "faultline.subsystem",
                AnyValue::from(report.subsystem.as_str()),
            ),
            (
                "faultline.window_start_ns",
                AnyValue::from(i(report.window_start_ns)),
            ),
            (
                "faultline.window_end_ns",
                AnyValue::from(i(report.window_end_ns)),
            ),
        ]);
        if let Some(t) = report.impact_factor_filtered {
            rec.add_attribute("faultline.impact_factor_filtered", t);
        }
        if let Some(onset) = report.anomaly_onset_ns {
            rec.add_attribute("faultline.anomaly_onset_ns", i(onset));
        }
        if let Some(top) = report.top_syscalls_by_time.first() {
            rec.add_attribute("faultline.top_syscall", top.syscall.clone());
            rec.add_attribute("faultline.top_syscall.increase_ratio", top.increase_ratio);
        }
        if let Some(vs) = &report.vital_signs {
            // Present (possibly empty) whenever the source delivered counters, so "measured,
            // nothing found" reads differently from "not measured" (attribute absent).
            let symptoms = names::target_symptoms(vs).into_iter().map(AnyValue::from);
            rec.add_attribute(
                "faultline.symptoms",
                AnyValue::ListAny(Box::new(symptoms.collect())),
            );
            // One key per symptom rather than a map: the `symptom` values are a closed set
            // of three, and flat keys stay queryable in backends that flatten attributes.
            for (symptom, tids) in names::symptom_threads(vs) {
                let tids = tids.into_iter().map(|t| AnyValue::from(i64::from(t)));
                rec.add_attribute(
                    format!("faultline.symptom_threads.{symptom}"),
                    AnyValue::ListAny(Box::new(tids.collect())),
                );
            }
        }
        self.logger.emit(rec);
    }

    /// Stops pushing the target's series (the router evicted it) and frees its place
    /// under `max_targets`.
    pub fn forget(&self, target: &str) {
        lock(&self.state).targets.remove(target);
    }

    /// Reports of targets beyond `max_targets`, not exported.
    pub fn capped_reports(&self) -> u64 {
        lock(&self.state).capped
    }

    /// Verdict log records emitted so far.
    pub fn verdict_logs(&self) -> u64 {
        lock(&self.state).verdict_logs
    }

    /// Pushes everything now and stops the exporters (the last metrics and pending verdict
    /// logs are sent). The SDK calls block, so they run off the async workers. Verdict
    /// records the collector still refuses are counted lost, and make this an error; so
    /// are they when the caller's time limit drops this future first.
    pub async fn shutdown(self) -> Result<(), SinkError> {
        let Self {
            meters,
            loggers,
            undelivered,
            redelivery_timer,
            ..
        } = self;
        redelivery_timer.stop().await;
        // One last try for the records the collector refused, bounded like the SDK's own
        // shutdown (a collector that never answers must not hold the exit); cut short, the
        // records stay pending and are counted lost below.
        let _ = tokio::time::timeout(FINAL_REDELIVERY, undelivered.flush()).await;
        let joined = tokio::task::spawn_blocking(move || {
            let m = meters.shutdown();
            let l = loggers.shutdown();
            m.and(l)
        })
        .await;
        // Records the SDK's batch thread still held when its own limit ran out are not
        // counted here: they never reached this sink's queue.
        let lost = undelivered.give_up();
        if lost > 0 {
            tracing::warn!(
                lost,
                "verdict records never reached the OTLP collector (counted in faultline_otlp_verdict_records_lost_total)"
            );
        }
        match joined {
            Ok(Ok(())) if lost == 0 => Ok(()),
            Ok(Ok(())) => Err(sink_error(format!(
                "{lost} verdict records could not be delivered"
            ))),
            Ok(Err(e)) => Err(sink_error(e.to_string())),
            Err(e) => Err(sink_error(e.to_string())),
        }
    }
}

fn sink_error(message: String) -> SinkError {
    SinkError {
        sink: "otlp",
        message,
    }
}

impl ReportSink for OtlpSink {
    fn name(&self) -> &'static str {
        "otlp"
    }
    fn publish(&mut self, report: &Report) -> Result<(), SinkError> {
        OtlpSink::publish(self, report);
        Ok(())
    }
    fn forget(&mut self, target: &str) {
        OtlpSink::forget(self, target);
    }
    // `flush` keeps the default no-op: pushes happen on the SDK's workers and a blocking
    // network flush would stall the engine thread; `shutdown` flushes.
}

fn snapshot(report: &Report, max_syscalls: usize, reports: [u64; 3]) -> TargetSnapshot {
    let mut ranked = Vec::new();
    for (dim, list) in [
        ("time", &report.top_syscalls_by_time),
        ("frequency", &report.top_syscalls_by_frequency),
    ] {
        ranked.extend(list.iter().take(max_syscalls).enumerate().map(|(i, r)| {
            (
                dim,
                (i + 1).to_string(),
                r.syscall.clone(),
                r.increase_ratio,
            )
        }));
    }
    let vs = report.vital_signs.as_ref();
    TargetSnapshot {
        impact_factor: report.impact_factor,
        impact_factor_filtered: report.impact_factor_filtered,
        onset_dispersion_seconds: report.onset_dispersion_seconds,
        time_lost: report.time_lost().map(|(p50, _)| p50),
        anomaly_onset_seconds: report.anomaly_onset_ns.map(|ns| ns as f64 / 1e9),
        last_report_unix_seconds: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
        silent_seconds: report.silent_seconds,
        verdict: report.verdict,
        subsystem: report.subsystem,
        hint: names::hint_label(&report.hint),
        threads: report.threads,
        active_threads: report.active_threads,
        ranked,
        syscalls: report
            .syscalls
            .iter()
            .take(max_syscalls)
            .map(|a| {
                (
                    a.syscall.clone(),
                    a.calls_per_second,
                    a.mean_latency_seconds,
                )
            })
            .collect(),
        reports_by_trigger: reports,
        vital_signs: vs.map(|v| names::vital_signs(&v.rates)).unwrap_or_default(),
        symptoms: vs.map(names::target_symptoms).unwrap_or_default(),
        symptom_threads: names::symptom_thread_counts(vs),
    }
}

/// A gauge over every target's snapshot; `f` yields (extra labels, value) per target.
fn target_gauge<F>(
    meter: &Meter,
    state: &Arc<Mutex<SinkState>>,
    name: &'static str,
    description: &'static str,
    f: F,
) where
    F: Fn(&TargetSnapshot) -> Vec<(Vec<KeyValue>, f64)> + Send + Sync + 'static,
{
    let state = state.clone();
    meter
        .f64_observable_gauge(name)
        .with_description(description)
        .with_callback(move |obs| {
            let st = lock(&state);
            for (target, snap) in &st.targets {
                for (mut labels, v) in f(snap) {
                    labels.insert(0, KeyValue::new("target", target.clone()));
                    obs.observe(v, &labels);
                }
            }
        })
        .build();
}

/// The points of a state-set gauge: one per `label` value, 1 for the current one.
fn state_set<const N: usize>(
    label: &'static str,
    values: [(&'static str, bool); N],
) -> Vec<(Vec<KeyValue>, f64)> {
    values
        .into_iter()
        .map(|(v, on)| (vec![KeyValue::new(label, v)], f64::from(u8::from(on))))
        .collect()
}

fn register_instruments(meter: &Meter, state: &Arc<Mutex<SinkState>>, telemetry: &Arc<Telemetry>) {
    meter
        .f64_observable_gauge(names::BUILD_INFO)
        .with_description("Constant 1, labelled with the running version")
        .with_callback(|obs| {
            obs.observe(1.0, &[KeyValue::new("version", env!("CARGO_PKG_VERSION"))]);
        })
        .build();
    let st = state.clone();
    meter
        .f64_observable_gauge(names::TARGETS)
        .with_description("Targets with exported series")
        .with_callback(move |obs| obs.observe(lock(&st).targets.len() as f64, &[]))
        .build();
    target_gauge(
        meter,
        state,
        names::IMPACT_FACTOR,
        "PerfCompass impact factor τ of the last report",
        |s| vec![(vec![], s.impact_factor)],
    );
    target_gauge(
        meter,
        state,
        names::IMPACT_FACTOR_FILTERED,
        "τ on I/O syscalls only, when filtering mode ran",
        |s| {
            s.impact_factor_filtered
                .map(|t| (vec![], t))
                .into_iter()
                .collect()
        },
    );
    target_gauge(
        meter,
        state,
        names::ONSET_DISPERSION,
        "Onset dispersion Ω of the last report",
        |s| vec![(vec![], s.onset_dispersion_seconds)],
    );
    target_gauge(
        meter,
        state,
        names::TIME_LOST,
        "Median share of their time the affected threads lost in the last report",
        |s| s.time_lost.map(|t| (vec![], t)).into_iter().collect(),
    );
    target_gauge(
        meter,
        state,
        names::ANOMALY_ONSET,
        "Estimated anomaly start, in the trace clock (Unix time for OTLP sources)",
        |s| {
            s.anomaly_onset_seconds
                .map(|t| (vec![], t))
                .into_iter()
                .collect()
        },
    );
    target_gauge(
        meter,
        state,
        names::LAST_REPORT,
        "Unix time at which the target's last report was received from the engine",
        |s| vec![(vec![], s.last_report_unix_seconds)],
    );
    target_gauge(
        meter,
        state,
        names::SILENT,
        "Seconds the target had made no system call at the end of its last report's window: 0 while it works; grows while it is frozen or hung (live perf/LTTng captures only)",
        |s| vec![(vec![], s.silent_seconds)],
    );
    target_gauge(
        meter,
        state,
        names::VERDICT,
        "State set: 1 for the target's current verdict (external, internal, none), 0 otherwise",
        |s| {
            state_set(
                "verdict",
                Verdict::ALL.map(|v| (v.as_str(), v == s.verdict)),
            )
        },
    );
    target_gauge(
        meter,
        state,
        names::SUBSYSTEM,
        "State set: 1 for the kernel subsystem the last report's ranking points at",
        |s| {
            state_set(
                "subsystem",
                Subsystem::ALL.map(|v| (v.as_str(), v == s.subsystem)),
            )
        },
    );
    target_gauge(
        meter,
        state,
        names::DIAGNOSIS_INFO,
        "Constant 1 per target, labelled with the last report's verdict, subsystem and hint",
        |s| {
            vec![(
                vec![
                    KeyValue::new("verdict", s.verdict.as_str()),
                    KeyValue::new("subsystem", s.subsystem.as_str()),
                    KeyValue::new("hint", s.hint.clone()),
                ],
                1.0,
            )]
        },
    );
    target_gauge(
        meter,
        state,
        names::THREADS,
        "Threads in the last report's window: total, active (τ's denominator), affected, directly_affected",
        |s| {
            thread_states(&s.threads, s.active_threads)
                .into_iter()
                .map(|(k, v)| (vec![KeyValue::new(names::THREAD_STATE_LABEL, k)], v as f64))
                .collect()
        },
    );
    target_gauge(
        meter,
        state,
        names::AFFECTED_SYSCALL_INCREASE,
        "Top-N affected syscalls: relative increase over baseline by time or frequency",
        |s| {
            s.ranked
                .iter()
                .map(|(dim, rank, sc, v)| {
                    (
                        vec![
                            KeyValue::new("syscall", sc.clone()),
                            KeyValue::new("dimension", *dim),
                            KeyValue::new("rank", rank.clone()),
                        ],
                        *v,
                    )
                })
                .collect()
        },
    );
    target_gauge(
        meter,
        state,
        names::SYSCALL_MEAN_LATENCY,
        "Mean execution time of the target's busiest syscalls in the last window",
        |s| {
            s.syscalls
                .iter()
                .map(|(sc, _, lat)| (vec![KeyValue::new("syscall", sc.clone())], *lat))
                .collect()
        },
    );
    target_gauge(
        meter,
        state,
        names::SYSCALL_CALLS_PER_SECOND,
        "Call rate of the target's busiest syscalls in the last window",
        |s| {
            s.syscalls
                .iter()
                .map(|(sc, cps, _)| (vec![KeyValue::new("syscall", sc.clone())], *cps))
                .collect()
        },
    );
    target_gauge(
        meter,
        state,
        names::VITAL_SIGN,
        "Hardware-counter ratios of the target over the last window; only with counters",
        |s| {
            s.vital_signs
                .iter()
                .map(|(sign, v)| (vec![KeyValue::new("sign", *sign)], *v))
                .collect()
        },
    );
    target_gauge(
        meter,
        state,
        names::SYMPTOM,
        "1 for each ChopStix symptom the target's counters show in the last report",
        |s| {
            s.symptoms
                .iter()
                .map(|sym| (vec![KeyValue::new("symptom", *sym)], 1.0))
                .collect()
        },
    );
    target_gauge(
        meter,
        state,
        names::SYMPTOM_THREADS,
        "Threads of the target whose own counters show the symptom (of the at most 8 listed)",
        |s| {
            s.symptom_threads
                .iter()
                .map(|(sym, k)| (vec![KeyValue::new("symptom", *sym)], *k as f64))
                .collect()
        },
    );

    let st = state.clone();
    meter
        .u64_observable_counter(names::REPORTS)
        .with_description("Reports received from the engine, by what triggered them")
        .with_callback(move |obs| {
            for (target, snap) in &lock(&st).targets {
                for ((_, trigger), n) in TRIGGERS.iter().zip(snap.reports_by_trigger) {
                    obs.observe(
                        n,
                        &[
                            KeyValue::new("target", target.clone()),
                            KeyValue::new("trigger", *trigger),
                        ],
                    );
                }
            }
        })
        .build();
    let st = state.clone();
    meter
        .u64_observable_counter(names::SERIES_CAPPED)
        .with_description("Reports not exported because max_targets was reached")
        .with_callback(move |obs| obs.observe(lock(&st).capped, &[KeyValue::new("sink", "otlp")]))
        .build();

    let t = telemetry.clone();
    meter
        .u64_observable_counter(names::EVENTS_RECEIVED)
        .with_description("Syscall events decoded, by source")
        .with_callback(move |obs| {
            for s in t.sources() {
                obs.observe(s.received(), &[KeyValue::new("source", s.name)]);
            }
        })
        .build();
    let t = telemetry.clone();
    meter
        .u64_observable_counter(names::DECODE_ERRORS)
        .with_description("Records or requests that could not be decoded, by source")
        .with_callback(move |obs| {
            for s in t.sources() {
                obs.observe(s.decode_errors(), &[KeyValue::new("source", s.name)]);
            }
        })
        .build();
    let t = telemetry.clone();
    meter
        .u64_observable_counter(names::EVENTS_DROPPED)
        .with_description("Events not analysed, by source and reason")
        .with_callback(move |obs| {
            for s in t.sources() {
                for r in DropReason::ALL {
                    obs.observe(
                        s.dropped(r),
                        &[
                            KeyValue::new("source", s.name),
                            KeyValue::new("reason", r.as_str()),
                        ],
                    );
                }
            }
        })
        .build();
    let t = telemetry.clone();
    meter
        .u64_observable_gauge(names::ENGINE_UP)
        .with_description(names::ENGINE_UP_HELP)
        .with_callback(move |obs| {
            let up = t.engine_up();
            // After a drain at shutdown the final push leaves it out: a backend keeps a
            // pushed 0 until it goes stale (minutes, no staleness marker over OTLP), which
            // would page FaultlineEngineDown for every planned stop.
            if up || !t.engine_drained() {
                obs.observe(u64::from(up), &[]);
            }
        })
        .build();
    let t = telemetry.clone();
    meter
        .u64_observable_gauge(names::TARGETS_QUARANTINED)
        .with_description(names::TARGETS_QUARANTINED_HELP)
        .with_callback(move |obs| obs.observe(t.targets_quarantined(), &[]))
        .build();
    // Process-wide counters of one value each, no labels.
    for (name, help, read) in [
        (
            names::TARGETS_EVICTED,
            names::TARGETS_EVICTED_HELP,
            Telemetry::targets_evicted as fn(&Telemetry) -> u64,
        ),
        (
            names::TARGET_QUARANTINES,
            names::TARGET_QUARANTINES_HELP,
            Telemetry::target_quarantines,
        ),
        (
            names::GUEST_RESTARTS,
            "Times the WASM engine guest was restarted after a trap",
            Telemetry::guest_restarts,
        ),
        (
            names::GUEST_RESTART_FAILURES,
            names::GUEST_RESTART_FAILURES_HELP,
            Telemetry::guest_restart_failures,
        ),
        (
            names::REORDER_LATE,
            "OTLP records fed behind a newer record of their target",
            |t| t.reorder().1,
        ),
        (
            names::REORDER_OVERFLOWS,
            "Times the full OTLP reorder stage fed records before their turn",
            |t| t.reorder().2,
        ),
    ] {
        let t = telemetry.clone();
        meter
            .u64_observable_counter(name)
            .with_description(help)
            .with_callback(move |obs| obs.observe(read(&t), &[]))
            .build();
    }
    let t = telemetry.clone();
    meter
        .u64_observable_counter(names::GUEST_TRAPS)
        .with_description(names::GUEST_TRAPS_HELP)
        .with_callback(move |obs| {
            for r in TrapReason::ALL {
                obs.observe(t.guest_traps_by(r), &[KeyValue::new("reason", r.as_str())]);
            }
        })
        .build();
    // The guest gauges exist only while a WASM host does (none for the native engine).
    for (name, help, read) in [
        (
            names::GUEST_UP,
            names::GUEST_UP_HELP,
            (|g| u64::from(g.up)) as fn(GuestGauges) -> u64,
        ),
        (names::GUEST_MEMORY, names::GUEST_MEMORY_HELP, |g| {
            g.memory_bytes
        }),
        (
            names::GUEST_MEMORY_LIMIT,
            names::GUEST_MEMORY_LIMIT_HELP,
            |g| g.memory_limit_bytes,
        ),
    ] {
        let t = telemetry.clone();
        meter
            .u64_observable_gauge(name)
            .with_description(help)
            .with_callback(move |obs| {
                if let Some(g) = t.guest() {
                    obs.observe(read(g), &[]);
                }
            })
            .build();
    }
    for (name, help, tally) in names::OTLP_SEGMENT_TALLIES {
        let t = telemetry.clone();
        meter
            .u64_observable_counter(name)
            .with_description(help)
            .with_callback(move |obs| {
                for s in t.sources() {
                    if s.segments().is_watched() {
                        let n = tally(&s.segments().get());
                        obs.observe(n, &[KeyValue::new("source", s.name)]);
                    }
                }
            })
            .build();
    }
    let t = telemetry.clone();
    meter
        .u64_observable_gauge(names::REORDER_HELD)
        .with_description("OTLP records waiting in the reorder stage")
        .with_callback(move |obs| obs.observe(t.reorder().0, &[]))
        .build();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_follow_the_protocol() {
        let c: OtlpSinkConfig = serde_json::from_str(r#"{"protocol":"http"}"#).unwrap();
        assert_eq!(c.endpoint(), "http://127.0.0.1:4318");
        assert_eq!(
            OtlpSinkConfig::default().endpoint(),
            "http://127.0.0.1:4317"
        );
        let c: OtlpSinkConfig = serde_json::from_str(r#"{"endpoint":"http://c:9/"}"#).unwrap();
        assert_eq!(c.endpoint(), "http://c:9");
        assert!(serde_json::from_str::<OtlpSinkConfig>(r#"{"url":"x"}"#).is_err());
    }
}
