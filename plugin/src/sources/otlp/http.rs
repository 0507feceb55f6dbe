//! OTLP/HTTP front end: `POST /v1/{logs,traces,metrics}` in binary protobuf or OTLP/JSON,
//! optionally gzip-compressed, plus `/v1/syscalls` for Vector-style flat JSON events.

use std::future::Future;
use std::io::Read;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use prost::Message;
use serde::Serialize;
use tokio::net::TcpListener;

use super::deliver::Delivery;
use super::grpc::RETRY_AFTER;
use super::ingest::{count_malformed, Ingest, Outcome};
use super::signal::{Logs, Metrics, Signal, Traces};
use crate::pipeline::telemetry::DropReason;

/// Path for Vector's `http` sink (`encoding.codec: json`, array or NDJSON framing).
pub const FLAT_JSON_PATH: &str = "/v1/syscalls";

const PROTOBUF: &str = "application/x-protobuf";
const JSON: &str = "application/json";

/// `google.rpc.Status`, the body OTLP/HTTP prescribes for error responses.
#[derive(Clone, PartialEq, Message, Serialize)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Encoding {
    Protobuf,
    Json,
}

#[derive(Clone, Debug)]
struct AppState {
    ingest: Ingest,
    max_request_bytes: usize,
}

/// Serves until `shutdown` resolves.
pub(crate) async fn serve(
    listener: TcpListener,
    ingest: Ingest,
    max_request_bytes: usize,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let state = AppState {
        ingest,
        max_request_bytes,
    };
    let app = Router::new()
        .route(Logs::HTTP_PATH, post(export::<Logs>))
        .route(Traces::HTTP_PATH, post(export::<Traces>))
        .route(Metrics::HTTP_PATH, post(export::<Metrics>))
        .route(FLAT_JSON_PATH, post(flat))
        .layer(DefaultBodyLimit::max(max_request_bytes))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            limit_in_flight,
        ))
        .with_state(state);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Runs before the body is read, so waiting requests hold a connection, not a body.
async fn limit_in_flight(
    State(state): State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let _permit = state.ingest.in_flight.acquire().await.ok();
    next.run(req).await
}

fn error(
    encoding: Encoding,
    status: StatusCode,
    grpc_code: tonic::Code,
    message: String,
) -> Response {
    let body = RpcStatus {
        code: grpc_code as i32,
        message,
    };
    let mut resp = encode(encoding, &body);
    *resp.status_mut() = status;
    resp
}

fn encode<M: Message + Serialize>(encoding: Encoding, msg: &M) -> Response {
    match encoding {
        Encoding::Protobuf => {
            ([(header::CONTENT_TYPE, PROTOBUF)], msg.encode_to_vec()).into_response()
        }
        Encoding::Json => {
            match serde_json::to_value(msg).and_then(|v| serde_json::to_vec(&without_nulls(v))) {
                Ok(v) => ([(header::CONTENT_TYPE, JSON)], v).into_response(),
                Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
            }
        }
    }
}

/// OTLP/JSON omits unset fields; the serde mapping writes `null` for an absent
/// `partialSuccess`, which strict proto3 JSON readers may not take.
fn without_nulls(v: serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(m) => m.into_iter().filter(|(_, v)| !v.is_null()).collect(),
        other => other,
    }
}

/// The request's encoding, or `None` for a content type OTLP does not define.
fn encoding_of(headers: &HeaderMap) -> Option<Encoding> {
    let ct = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let media = ct
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match media.as_str() {
        "application/x-protobuf" | "application/protobuf" => Some(Encoding::Protobuf),
        "application/json" | "application/x-ndjson" => Some(Encoding::Json),
        _ => None,
    }
}

/// The body after `Content-Encoding`, or the response to send instead.
// A plain `Response` error: built at most once per request, boxing it would buy nothing.
#[allow(clippy::result_large_err)]
fn decoded_body(
    state: &AppState,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    encoding: Encoding,
) -> Result<Bytes, Response> {
    let stats = state.ingest.sender.stats();
    let body = match body {
        Ok(b) => b,
        Err(rejection) => {
            let status = rejection.status();
            if status == StatusCode::PAYLOAD_TOO_LARGE {
                stats.add_dropped(DropReason::TooLarge, 1);
            }
            return Err(error(
                encoding,
                status,
                tonic::Code::InvalidArgument,
                rejection.body_text(),
            ));
        }
    };
    let content_encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase());
    match content_encoding.as_deref() {
        None | Some("") | Some("identity") => Ok(body),
        Some("gzip") | Some("x-gzip") => {
            // The limit applies after decompression too, so a small bomb cannot blow memory.
            let limit = state.max_request_bytes as u64;
            let mut out = Vec::new();
            let mut reader = flate2::read::MultiGzDecoder::new(body.as_ref()).take(limit + 1);
            if let Err(e) = reader.read_to_end(&mut out) {
                count_malformed(&state.ingest.sender);
                return Err(error(
                    encoding,
                    StatusCode::BAD_REQUEST,
                    tonic::Code::InvalidArgument,
                    format!("invalid gzip body: {e}"),
                ));
            }
            if out.len() as u64 > limit {
                stats.add_dropped(DropReason::TooLarge, 1);
                return Err(error(
                    encoding,
                    StatusCode::PAYLOAD_TOO_LARGE,
                    tonic::Code::InvalidArgument,
                    format!("decompressed body exceeds {limit} bytes"),
                ));
            }
            Ok(Bytes::from(out))
        }
        Some(other) => Err(error(
            encoding,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            tonic::Code::InvalidArgument,
            format!("unsupported Content-Encoding `{other}` (gzip or none)"),
        )),
    }
}

/// Queue-full is 503 with Retry-After: retryable for OTLP/HTTP clients.
fn respond<M: Message + Serialize>(encoding: Encoding, outcome: Outcome<M>) -> Response {
    match outcome {
        Ok(resp) => encode(encoding, &resp),
        Err(Delivery::QueueFull) => {
            let mut r = error(
                encoding,
                StatusCode::SERVICE_UNAVAILABLE,
                tonic::Code::ResourceExhausted,
                "faultline engine queue is full; retry later".into(),
            );
            r.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(RETRY_AFTER.as_secs()),
            );
            r
        }
        Err(Delivery::Closed) | Err(Delivery::Accepted { .. }) => error(
            encoding,
            StatusCode::SERVICE_UNAVAILABLE,
            tonic::Code::Unavailable,
            "faultline is shutting down".into(),
        ),
    }
}

fn starts_like_array(body: &[u8]) -> bool {
    body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[')
}

async fn export<S: Signal>(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let Some(encoding) = encoding_of(&headers) else {
        return error(
            Encoding::Json,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            tonic::Code::InvalidArgument,
            format!("Content-Type must be {PROTOBUF} or {JSON}"),
        );
    };
    let body = match decoded_body(&state, &headers, body, encoding) {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let ingest = &state.ingest;
    let request = match encoding {
        Encoding::Protobuf => {
            if let Some(outcome) = S::handle_bytes(ingest, &body) {
                return respond(encoding, outcome);
            }
            S::Req::decode(body.as_ref()).map_err(|e| format!("malformed OTLP protobuf: {e}"))
        }
        // A JSON array on /v1/logs is Vector-style flat events, not an OTLP document.
        Encoding::Json if S::HTTP_PATH == Logs::HTTP_PATH && starts_like_array(&body) => {
            return flat_response(ingest, &body);
        }
        Encoding::Json => {
            serde_json::from_slice::<S::Req>(&body).map_err(|e| format!("malformed OTLP/JSON: {e}"))
        }
    };
    match request {
        Ok(req) => respond(encoding, S::handle(ingest, &req)),
        Err(message) => {
            count_malformed(&ingest.sender);
            error(
                encoding,
                StatusCode::BAD_REQUEST,
                tonic::Code::InvalidArgument,
                message,
            )
        }
    }
}

fn flat_response(ingest: &Ingest, body: &[u8]) -> Response {
    match ingest.flat_json(body) {
        Ok(outcome) => respond(Encoding::Json, outcome),
        Err(message) => {
            count_malformed(&ingest.sender);
            error(
                Encoding::Json,
                StatusCode::BAD_REQUEST,
                tonic::Code::InvalidArgument,
                message,
            )
        }
    }
}

async fn flat(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    // Vector may omit or vary the content type; whatever it is, this path only takes JSON.
    let body = match decoded_body(&state, &headers, body, Encoding::Json) {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    flat_response(&state.ingest, &body)
}
