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

/// How long `/trigger` waits for the engine before answering 503 (it may be busy, or
/// waiting up to `[pipeline] trigger_wait_seconds` for the target's data).
pub(crate) const TRIGGER_TIMEOUT: Duration = Duration::from_secs(30);

/// What the handlers read.
#[derive(Clone, Debug)]
pub struct HttpState {
    pub exporter: Arc<PrometheusExporter>,
    pub latest: Arc<LatestReports>,
    pub commands: mpsc::Sender<EngineCommand>,
    /// True while the engine thread runs.
    pub engine_alive: Arc<AtomicBool>,
}

/// The routes. `/metrics` also exports the `/report` store's refused reports.
pub fn router(state: HttpState) -> Router {
    state.exporter.watch_report_store(state.latest.clone());
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

/// 200 `ok` while the engine runs and every live capture reads; else 503 naming what
/// is down (a capture that ended leaves its targets unwatched: a liveness probe should see it).
/// A WASM engine without a running guest (its restart failed and backs off) is down too:
/// it analyses nothing meanwhile.
async fn healthz(State(s): State<HttpState>) -> Response {
    if !s.engine_alive.load(Ordering::Relaxed) {
        return (StatusCode::SERVICE_UNAVAILABLE, "engine stopped\n").into_response();
    }
    if s.exporter.guest_unavailable() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "engine guest unavailable\n",
        )
            .into_response();
    }
    let down = s.exporter.sources_down();
    if down.is_empty() {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        let msg = format!("live source ended: {}\n", down.join(", "));
        (StatusCode::SERVICE_UNAVAILABLE, msg).into_response()
    }
}

#[derive(Debug, Deserialize)]
struct TriggerQuery {
    target: Option<String>,
    at_ns: Option<u64>,
}

/// The part of an Alertmanager webhook body we read.
#[derive(Debug, Deserialize)]
struct AlertmanagerBody {
    alerts: Vec<Alert>,
}

#[derive(Debug, Deserialize)]
struct Alert {
    #[serde(default)]
    status: String,
    #[serde(default)]
    labels: std::collections::BTreeMap<String, String>,
    #[serde(rename = "startsAt", default)]
    starts_at: String,
}

/// Alerts handled from one webhook call; Alertmanager groups alerts, so this bounds work.
const MAX_ALERTS: usize = 64;

fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, Json(serde_json::json!({ "error": msg.into() }))).into_response()
}

/// `POST /trigger?target=X&at_ns=T`, or an Alertmanager webhook body (no query): each
/// firing alert with a `target` label triggers that target at its `startsAt`.
async fn trigger(
    State(s): State<HttpState>,
    Query(q): Query<TriggerQuery>,
    body: axum::body::Bytes,
) -> Response {
    match (q.target, q.at_ns) {
        (Some(target), Some(at_ns)) => match ask(&s, target.clone(), at_ns).await {
            Ok(Some(r)) => Json(r).into_response(),
            Ok(None) => error(
                StatusCode::NOT_FOUND,
                format!("no diagnosis for target `{target}` at {at_ns} ns (unknown target or no data)"),
            ),
            Err(resp) => resp,
        },
        (Some(_), None) | (None, Some(_)) => error(
            StatusCode::BAD_REQUEST,
            "give both `target` and `at_ns` (nanoseconds, trace clock), or an Alertmanager webhook body",
        ),
        (None, None) => alertmanager(&s, &body).await,
    }
}

async fn alertmanager(s: &HttpState, body: &[u8]) -> Response {
    let parsed: AlertmanagerBody = match serde_json::from_slice(body) {
        Ok(b) => b,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("expected ?target=&at_ns= or an Alertmanager webhook body: {e}"),
            )
        }
    };
    let mut reports = Vec::new();
    let mut skipped = Vec::new();
    for a in parsed.alerts.iter().take(MAX_ALERTS) {
        let target = a.labels.get("target");
        // Alertmanager's zero time (0001-01-01) and pre-1970 dates are "no time".
        let at = crate::time::rfc3339_to_unix_ns(&a.starts_at).filter(|&v| v > 0);
        match (a.status.as_str(), target, at) {
            ("firing", Some(t), Some(at_ns)) => match ask(s, t.clone(), at_ns).await {
                Ok(Some(r)) => reports.push(r),
                Ok(None) => skipped.push(format!("{t}: no data")),
                Err(resp) => return resp,
            },
            ("firing", None, _) => skipped.push("alert without a `target` label".to_owned()),
            ("firing", Some(t), None) => skipped.push(format!("{t}: unreadable startsAt")),
            _ => {}
        }
    }
    Json(serde_json::json!({ "reports": reports, "skipped": skipped })).into_response()
}

/// Asks the engine thread for an on-demand report; `Err` is the HTTP answer to give.
async fn ask(
    s: &HttpState,
    target: String,
    at_ns: u64,
) -> Result<Option<faultline_engine::Report>, Response> {
    let (reply, answer) = oneshot::channel();
    let cmd = EngineCommand::Trigger {
        target,
        at_ns,
        reply,
    };
    if s.commands.try_send(cmd).is_err() {
        return Err(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "engine busy or stopped, retry",
        ));
    }
    match tokio::time::timeout(TRIGGER_TIMEOUT, answer).await {
        Ok(Ok(Ok(r))) => Ok(r),
        Ok(Ok(Err(e))) => Err(error(StatusCode::INTERNAL_SERVER_ERROR, e)),
        Ok(Err(_)) | Err(_) => Err(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "engine did not answer in time",
        )),
    }
}
