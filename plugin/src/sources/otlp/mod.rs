//! The OTLP receiver: syscall events pushed as OTLP logs or spans over gRPC (`otlp_grpc`)
//! and HTTP (`otlp_http`), decoded into per-process [`crate::model::EventBatch`]es.
//!
//! The attribute mapping is documented in `docs/otlp-mapping.md`. Flow per request:
//! front end (`grpc`/`http`) → `ingest` (decode by `signal`) → `convert`/`record`/`flat_json`
//! (records → events, grouped per process) → `deliver` (bounded queue, counters).

pub mod attributes;
mod convert;
mod deliver;
mod flat_json;
mod grpc;
pub mod http;
mod ingest;
mod logs_wire;
mod record;
pub mod segment_metrics;
mod signal;
mod wire;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;

pub use attributes::OtlpAttributeNames;
pub use deliver::OtlpCounters;
pub use http::FLAT_JSON_PATH;
pub use segment_metrics::SegmentMetricNames;

use crate::pipeline::queue::BatchSender;

/// Requests each listener reads and decodes at once (see `ingest::Ingest::in_flight`).
pub const MAX_IN_FLIGHT_REQUESTS: usize = 16;

/// Source name (metric label) of the gRPC receiver.
pub const GRPC_SOURCE: &str = "otlp_grpc";
/// Source name (metric label) of the HTTP receiver.
pub const HTTP_SOURCE: &str = "otlp_http";

/// `[sources.otlp]`: where to listen and how to read records. Defaults listen on loopback
/// only, at the OTLP standard ports, so nothing is exposed without a config change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OtlpSourceConfig {
    /// gRPC listen address (`host:port`); `None` disables the gRPC receiver.
    pub grpc: Option<String>,
    /// HTTP listen address (`host:port`); `None` disables the HTTP receiver.
    pub http: Option<String>,
    /// Largest accepted request (after decompression for HTTP) in bytes.
    pub max_request_bytes: usize,
    pub attributes: OtlpAttributeNames,
    /// Metrics that carry the TCP segments a network namespace sent and retransmitted.
    pub tcp_segments: SegmentMetricNames,
}

impl Default for OtlpSourceConfig {
    fn default() -> Self {
        Self {
            grpc: Some("127.0.0.1:4317".into()),
            http: Some("127.0.0.1:4318".into()),
            max_request_bytes: 4 * 1024 * 1024,
            attributes: OtlpAttributeNames::default(),
            tcp_segments: SegmentMetricNames::default(),
        }
    }
}

/// Why the receiver could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum OtlpSourceError {
    #[error(
        "cannot listen for OTLP/{proto} on {addr} (sources.otlp.{}): {source}",
        if *proto == "gRPC" { "grpc" } else { "http" }
    )]
    Bind {
        proto: &'static str,
        addr: String,
        source: std::io::Error,
    },
    #[error("OTLP/gRPC server failed: {0}")]
    Grpc(#[from] tonic::transport::Error),
    #[error("OTLP/HTTP server failed: {0}")]
    Http(std::io::Error),
    #[error("OTLP server task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// A running receiver: its bound addresses (port 0 resolved) and counters.
#[derive(Debug)]
pub struct OtlpServer {
    pub grpc_addr: Option<SocketAddr>,
    pub http_addr: Option<SocketAddr>,
    /// Tallies of the gRPC receiver that have no slot in the source's `SourceStats`.
    pub grpc_counters: Arc<OtlpCounters>,
    /// Same for the HTTP receiver.
    pub http_counters: Arc<OtlpCounters>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<Result<(), OtlpSourceError>>>,
}

impl OtlpServer {
    /// Asks both servers to stop accepting (in-flight requests finish).
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// Waits until both servers have stopped; the first failure wins.
    pub async fn wait(self) -> Result<(), OtlpSourceError> {
        let mut first = Ok(());
        for t in self.tasks {
            let r = t.await.map_err(OtlpSourceError::from).and_then(|r| r);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

async fn bind(proto: &'static str, addr: &str) -> Result<TcpListener, OtlpSourceError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| OtlpSourceError::Bind {
            proto,
            addr: addr.to_string(),
            source,
        })
}

/// Binds the configured listeners and serves them in background tasks until `shutdown`
/// resolves or [`OtlpServer::stop`] is called. Senders should be made for
/// [`GRPC_SOURCE`] and [`HTTP_SOURCE`] so drops are labelled per receiver.
pub async fn start(
    cfg: &OtlpSourceConfig,
    grpc_sender: BatchSender,
    http_sender: BatchSender,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<OtlpServer, OtlpSourceError> {
    let grpc_listener = match &cfg.grpc {
        Some(a) => Some(bind("gRPC", a).await?),
        None => None,
    };
    let http_listener = match &cfg.http {
        Some(a) => Some(bind("HTTP", a).await?),
        None => None,
    };
    let (stop, stopped) = watch::channel(false);
    let stop_on_shutdown = stop.clone();
    tokio::spawn(async move {
        shutdown.await;
        stop_on_shutdown.send_replace(true);
    });
    let until_stopped = move || {
        let mut rx = stopped.clone();
        async move {
            // An error means the sender is gone, which also means stop.
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let names = Arc::new(cfg.attributes.clone());
    // A listening receiver that reads segment metrics exports their tallies, from 0
    // (`faultline_otlp_tcp_segment_*`).
    let watch_segments = |sender: &BatchSender| {
        if cfg.tcp_segments.enabled {
            sender.stats().segments().watch();
        }
    };
    let segments = Arc::new(segment_metrics::SegmentTracker::new(
        cfg.tcp_segments.clone(),
    ));
    let max = cfg.max_request_bytes.max(1);
    let grpc_counters = Arc::new(OtlpCounters::default());
    let http_counters = Arc::new(OtlpCounters::default());
    let mut tasks = Vec::new();
    let mut grpc_addr = None;
    if let Some(listener) = grpc_listener {
        grpc_addr = listener.local_addr().ok();
        watch_segments(&grpc_sender);
        let ingest = ingest::Ingest {
            sender: grpc_sender,
            names: names.clone(),
            counters: grpc_counters.clone(),
            segments: segments.clone(),
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT_REQUESTS)),
        };
        let until = until_stopped();
        tasks.push(tokio::spawn(async move {
            grpc::serve(listener, ingest, max, until)
                .await
                .map_err(OtlpSourceError::from)
        }));
    }
    let mut http_addr = None;
    if let Some(listener) = http_listener {
        http_addr = listener.local_addr().ok();
        watch_segments(&http_sender);
        let ingest = ingest::Ingest {
            sender: http_sender,
            names,
            counters: http_counters.clone(),
            segments,
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT_REQUESTS)),
        };
        let until = until_stopped();
        tasks.push(tokio::spawn(async move {
            http::serve(listener, ingest, max, until)
                .await
                .map_err(OtlpSourceError::Http)
        }));
    }
    Ok(OtlpServer {
        grpc_addr,
        http_addr,
        grpc_counters,
        http_counters,
        stop,
        tasks,
    })
}

/// [`start`] then wait: serves until `shutdown` resolves.
pub async fn serve(
    cfg: &OtlpSourceConfig,
    grpc_sender: BatchSender,
    http_sender: BatchSender,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), OtlpSourceError> {
    start(cfg, grpc_sender, http_sender, shutdown)
        .await?
        .wait()
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_and_unknown_keys() {
        let c: OtlpSourceConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(c, OtlpSourceConfig::default());
        assert_eq!(c.grpc.as_deref(), Some("127.0.0.1:4317"));
        assert_eq!(c.max_request_bytes, 4 << 20);
        let c: OtlpSourceConfig =
            serde_json::from_str(r#"{"grpc":null,"attributes":{"thread_id":"tid"}}"#).unwrap();
        assert_eq!(c.grpc, None);
        assert_eq!(c.attributes.thread_id, "tid");
        assert!(serde_json::from_str::<OtlpSourceConfig>(r#"{"listen":"x"}"#).is_err());
    }

    /// The runtime's `[sources.otlp]` section flattens this struct next to its `enabled`
    /// (note: serde's flatten hides unknown top-level keys from `deny_unknown_fields`).
    #[test]
    fn config_flattens_into_a_section_with_enabled() {
        #[derive(Deserialize)]
        struct Section {
            #[allow(dead_code)]
            enabled: bool,
            #[serde(flatten)]
            otlp: OtlpSourceConfig,
        }
        let s: Section = serde_json::from_str(r#"{"enabled":true,"http":"0.0.0.0:4318"}"#).unwrap();
        assert_eq!(s.otlp.http.as_deref(), Some("0.0.0.0:4318"));
    }
}
