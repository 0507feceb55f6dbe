//! The transport-independent receiver: decode a request of one signal, queue its batches,
//! and build the OTLP response body. gRPC and HTTP wrap it with their own status codes.

use std::sync::Arc;

use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};

use super::attributes::OtlpAttributeNames;
use super::convert::{self, Decoded};
use super::deliver::{deliver, Delivery, OtlpCounters};
use super::segment_metrics::{self, SegmentTracker};
use crate::pipeline::queue::BatchSender;
use crate::pipeline::telemetry::DropReason;

/// Everything a front end needs to accept requests for one source name.
#[derive(Clone, Debug)]
pub(crate) struct Ingest {
    pub sender: BatchSender,
    pub names: Arc<OtlpAttributeNames>,
    pub counters: Arc<OtlpCounters>,
    /// The TCP segment metrics' last readings (shared by both listeners).
    pub segments: Arc<SegmentTracker>,
    /// Requests being read or decoded at once; bodies are buffered whole, so this bounds
    /// the receiver's memory at about `in_flight × max_request_bytes` (×2 while decoding).
    pub in_flight: Arc<tokio::sync::Semaphore>,
}

/// A request that did not even decode: one dropped request (`reason="malformed"`; see
/// [`DropReason::Malformed`]).
pub(crate) fn count_malformed(sender: &BatchSender) {
    sender.stats().add_dropped(DropReason::Malformed, 1);
}

/// Outcome of one export: either the response body to send, or why not.
pub(crate) type Outcome<R> = Result<R, Delivery>;

impl Ingest {
    fn source(&self) -> &'static str {
        self.sender.stats().name
    }

    fn run<R>(&self, decoded: Decoded, ok: impl FnOnce(i64, String) -> R) -> Outcome<R> {
        Self::respond(deliver(&self.sender, &self.counters, decoded), ok)
    }

    fn respond<R>(delivered: Delivery, ok: impl FnOnce(i64, String) -> R) -> Outcome<R> {
        match delivered {
            Delivery::Accepted { rejected, message } => {
                Ok(ok(i64::try_from(rejected).unwrap_or(i64::MAX), message))
            }
            other => Err(other),
        }
    }

    pub fn logs(&self, req: &ExportLogsServiceRequest) -> Outcome<ExportLogsServiceResponse> {
        self.logs_decoded(convert::logs(self.source(), &self.names, req))
    }

    /// A serialized logs request decoded without prost's owned tree (see `logs_wire`);
    /// `None` when prost must decode it (unusual shapes, malformed bytes).
    pub fn logs_bytes(&self, body: &[u8]) -> Option<Outcome<ExportLogsServiceResponse>> {
        let d = super::logs_wire::logs(self.source(), &self.names, body).ok()?;
        Some(self.logs_decoded(d))
    }

    fn logs_decoded(&self, d: Decoded) -> Outcome<ExportLogsServiceResponse> {
        self.run(d, |rejected, message| ExportLogsServiceResponse {
            partial_success: (rejected > 0).then_some(ExportLogsPartialSuccess {
                rejected_log_records: rejected,
                error_message: message,
            }),
        })
    }

    pub fn traces(&self, req: &ExportTraceServiceRequest) -> Outcome<ExportTraceServiceResponse> {
        let d = convert::traces(self.source(), &self.names, req);
        self.run(d, |rejected, message| ExportTraceServiceResponse {
            partial_success: (rejected > 0).then_some(ExportTracePartialSuccess {
                rejected_spans: rejected,
                error_message: message,
            }),
        })
    }

    /// Metrics: decoded, queued and, when refused, rolled back under the segment tracker's
    /// lock, so a retried request finds the series as the refused one did.
    pub fn metrics(
        &self,
        req: &ExportMetricsServiceRequest,
    ) -> Outcome<ExportMetricsServiceResponse> {
        let mut state = self.segments.lock();
        let (d, undo) =
            segment_metrics::metrics(self.source(), &self.names, &self.segments, &mut state, req);
        let delivered = deliver(&self.sender, &self.counters, d);
        if !matches!(delivered, Delivery::Accepted { .. }) {
            state.restore(undo);
        }
        drop(state);
        Self::respond(delivered, |rejected, message| {
            ExportMetricsServiceResponse {
                partial_success: (rejected > 0).then_some(ExportMetricsPartialSuccess {
                    rejected_data_points: rejected,
                    error_message: message,
                }),
            }
        })
    }

    /// Vector-style flat JSON objects (array or NDJSON), answered like a logs export.
    /// `Err` when the body is not JSON events at all.
    pub fn flat_json(&self, body: &[u8]) -> Result<Outcome<ExportLogsServiceResponse>, String> {
        let d = super::flat_json::decode(self.source(), &self.names, body)?;
        Ok(self.run(d, |rejected, message| ExportLogsServiceResponse {
            partial_success: (rejected > 0).then_some(ExportLogsPartialSuccess {
                rejected_log_records: rejected,
                error_message: message,
            }),
        }))
    }
}
