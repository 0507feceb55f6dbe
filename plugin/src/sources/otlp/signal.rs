//! The three OTLP signals as types, so gRPC and HTTP serve them with one generic code path.

use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::ingest::{Ingest, Outcome};

/// One OTLP signal: its gRPC service name, HTTP path, messages and handler, so both
/// front ends serve every signal through the same generic code.
pub(crate) trait Signal: Send + Sync + 'static {
    const SERVICE: &'static str;
    const HTTP_PATH: &'static str;
    type Req: Message + Default + DeserializeOwned;
    type Resp: Message + Default + Serialize + 'static;
    fn handle(ingest: &Ingest, req: &Self::Req) -> Outcome<Self::Resp>;
    /// Handles serialized protobuf without prost's owned tree where a borrowed walk exists
    /// (the hot signal); `None` means decode with prost and call [`Signal::handle`].
    fn handle_bytes(_ingest: &Ingest, _body: &[u8]) -> Option<Outcome<Self::Resp>> {
        None
    }
}

pub(crate) struct Logs;
pub(crate) struct Traces;
pub(crate) struct Metrics;

impl Signal for Logs {
    const SERVICE: &'static str = "opentelemetry.proto.collector.logs.v1.LogsService";
    const HTTP_PATH: &'static str = "/v1/logs";
    type Req = ExportLogsServiceRequest;
    type Resp = ExportLogsServiceResponse;
    fn handle(ingest: &Ingest, req: &Self::Req) -> Outcome<Self::Resp> {
        ingest.logs(req)
    }
    fn handle_bytes(ingest: &Ingest, body: &[u8]) -> Option<Outcome<Self::Resp>> {
        ingest.logs_bytes(body)
    }
}

impl Signal for Traces {
    const SERVICE: &'static str = "opentelemetry.proto.collector.trace.v1.TraceService";
    const HTTP_PATH: &'static str = "/v1/traces";
    type Req = ExportTraceServiceRequest;
    type Resp = ExportTraceServiceResponse;
    fn handle(ingest: &Ingest, req: &Self::Req) -> Outcome<Self::Resp> {
        ingest.traces(req)
    }
}

impl Signal for Metrics {
    const SERVICE: &'static str = "opentelemetry.proto.collector.metrics.v1.MetricsService";
    const HTTP_PATH: &'static str = "/v1/metrics";
    type Req = ExportMetricsServiceRequest;
    type Resp = ExportMetricsServiceResponse;
    fn handle(ingest: &Ingest, req: &Self::Req) -> Outcome<Self::Resp> {
        ingest.metrics(req)
    }
}
