//! The HTTP endpoint of `faultline run`: `/metrics` (OpenMetrics), `/report` (latest report
//! per target, JSON), `/healthz`, and `POST /trigger` for on-demand diagnosis by an
//! external alarm (e.g. an Alertmanager webhook pointed at
//! `/trigger?target=db&at_ns=1700000000000000000`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use super::prometheus::{PrometheusExporter, CONTENT_TYPE};
use crate::pipeline::engine_task::EngineCommand;
use crate::pipeline::latest::LatestReports;

/// How long `/trigger` waits for the engine before answering 503 (it may be busy).
const TRIGGER_TIMEOUT: Duration = Duration::from_secs(30);

/// What the handlers read.
#[derive(Clone, Debug)]
pub struct HttpState {
    pub exporter: Arc<PrometheusExporter>,
    pub latest: Arc<LatestReports>,
    pub commands: mpsc::Sender<EngineCommand>,
    /// True while the engine thread runs.
    pub engine_alive: Arc<AtomicBool>,
}

/// The routes.
pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/report", get(report))
        .route("/healthz", get(healthz))
        .route("/trigger", post(trigger))
        .with_state(state)
}

/// Binds `addr` (port 0 picks a free port) and returns the listener and its real address.
pub async fn bind(addr: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
    let l = TcpListener::bind(addr).await?;
    let local = l.local_addr()?;
    Ok((l, local))
}

/// Serves until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    state: HttpState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

async fn metrics(State(s): State<HttpState>) -> Response {
    match s.exporter.encode() {
        Ok(body) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "metrics encoding failed\n",
        )
            .into_response(),
    }
}

#[derive(Debug, Deserialize)]
struct ReportQuery {
    target: Option<String>,
}

async fn report(State(s): State<HttpState>, Query(q): Query<ReportQuery>) -> Response {
    let reports = match q.target {
        Some(t) => s.latest.get(&t).into_iter().collect(),
        None => s.latest.all(),
    };
    Json(reports).into_response()
}

async fn healthz(State(s): State<HttpState>) -> Response {
    if s.engine_alive.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "engine stopped\n").into_response()
    }
}

#[derive(Debug, Deserialize)]
struct TriggerQuery {
    target: String,
    at_ns: u64,
}

fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, Json(serde_json::json!({ "error": msg.into() }))).into_response()
}

async fn trigger(State(s): State<HttpState>, Query(q): Query<TriggerQuery>) -> Response {
    let (reply, answer) = oneshot::channel();
    let cmd = EngineCommand::Trigger {
        target: q.target.clone(),
        at_ns: q.at_ns,
        reply,
    };
    if s.commands.try_send(cmd).is_err() {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "engine busy or stopped, retry",
        );
    }
    match tokio::time::timeout(TRIGGER_TIMEOUT, answer).await {
        Ok(Ok(Ok(Some(r)))) => Json(r).into_response(),
        Ok(Ok(Ok(None))) => error(
            StatusCode::NOT_FOUND,
            format!(
                "no diagnosis for target `{}` at {} ns (unknown target or no data)",
                q.target, q.at_ns
            ),
        ),
        Ok(Ok(Err(e))) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
        Ok(Err(_)) | Err(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "engine did not answer in time",
        ),
    }
}
