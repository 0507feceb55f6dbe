//! Counts the OTLP push sink's failed exports.
//!
//! The OpenTelemetry SDK's exporters retry a failed export for a few seconds, then report
//! the failure only through the SDK's own internal diagnostics: a collector that is down or
//! refusing would go unseen in faultline's metrics. These wrappers sit between the SDK and
//! the OTLP exporters, count each failed export per signal (exported on `/metrics` as
//! `faultline_otlp_export_failures_total{signal}`) and log the error, at most once a minute
//! per signal. Refused verdict records are kept and sent again by
//! [`super::otlp_redelivery`].

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry::logs::Severity;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::logs::{LogBatch, LogExporter};
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::Resource;

use crate::pipeline::telemetry::{OtlpSignal, Telemetry};

/// Counts failed exports (in [`Telemetry`]) and warns at most once a minute per signal.
#[derive(Debug)]
pub struct ExportFailures {
    telemetry: Arc<Telemetry>,
    last_warned: Mutex<[Option<Instant>; 2]>,
}

/// Between two warnings of one signal: a collector that is down fails every export.
const WARN_EVERY: Duration = Duration::from_secs(60);

impl ExportFailures {
    pub fn new(telemetry: Arc<Telemetry>) -> Self {
        Self {
            telemetry,
            last_warned: Mutex::new([None; 2]),
        }
    }

    fn record(&self, signal: OtlpSignal, result: &OTelSdkResult) {
        let Err(e) = result else {
            return;
        };
        let n = self.telemetry.add_otlp_export_failure(signal);
        let mut last = self.last_warned.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let Some(slot) = last.get_mut(signal as usize) else {
            return;
        };
        if slot.is_none_or(|t| now.duration_since(t) >= WARN_EVERY) {
            *slot = Some(now);
            tracing::warn!(
                signal = signal.as_str(),
                failures = n,
                error = %e,
                "OTLP export failed (counted in faultline_otlp_export_failures_total)"
            );
        }
    }
}

/// An exporter whose failed exports are counted in `failures`.
#[derive(Debug)]
pub struct Counted<E> {
    inner: E,
    failures: Arc<ExportFailures>,
}

impl<E> Counted<E> {
    pub fn new(inner: E, failures: Arc<ExportFailures>) -> Self {
        Self { inner, failures }
    }
}

impl<E: PushMetricExporter> PushMetricExporter for Counted<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let r = self.inner.export(metrics).await;
        self.failures.record(OtlpSignal::Metrics, &r);
        r
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

impl<E: LogExporter> LogExporter for Counted<E> {
    async fn export(&self, batch: LogBatch<'_>) -> OTelSdkResult {
        let r = self.inner.export(batch).await;
        self.failures.record(OtlpSignal::Logs, &r);
        r
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn event_enabled(&self, level: Severity, target: &str, name: Option<&str>) -> bool {
        self.inner.event_enabled(level, target, name)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_sdk::error::OTelSdkError;

    #[test]
    fn failed_exports_are_counted_per_signal() {
        let t = Arc::new(Telemetry::default());
        let f = ExportFailures::new(t.clone());
        let refused = || Err(OTelSdkError::InternalFailure("refused".into()));
        f.record(OtlpSignal::Logs, &Ok(()));
        f.record(OtlpSignal::Logs, &refused());
        f.record(OtlpSignal::Logs, &refused());
        f.record(
            OtlpSignal::Metrics,
            &Err(OTelSdkError::Timeout(Duration::from_secs(1))),
        );
        assert_eq!(t.otlp_export_failures(OtlpSignal::Logs), 2);
        assert_eq!(t.otlp_export_failures(OtlpSignal::Metrics), 1);
    }
}
