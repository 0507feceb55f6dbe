//! OTLP/gRPC front end: the three collector `Export` methods on one tonic server.
//!
//! The services are hand-rolled over [`tonic::server::Grpc`] instead of the generated
//! `*ServiceServer`s because the generated ones decode with tonic's prost codec, which
//! answers a malformed message `INTERNAL` before our code sees it; OTLP wants
//! `INVALID_ARGUMENT` (not retryable), and faultline wants the error counted.

use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use prost::Message;
use tokio::net::TcpListener;
use tonic::codec::{
    Codec, CompressionEncoding, DecodeBuf, Decoder, EnabledCompressionEncodings, EncodeBuf, Encoder,
};
use tonic::codegen::{http, BoxFuture, Service, StdError};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::transport::server::TcpIncoming;
use tonic::{Code, Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt};

use super::deliver::Delivery;
use super::ingest::{count_malformed, Ingest, Outcome};
use super::signal::{Logs, Metrics, Signal, Traces};
use crate::pipeline::telemetry::DropReason;

/// How long a client is asked to wait when the engine queue is full.
pub(crate) const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Queue-full is RESOURCE_EXHAUSTED with RetryInfo: OTLP clients only retry it with one.
fn to_status<R>(outcome: Outcome<R>) -> Result<Response<R>, Status> {
    match outcome {
        Ok(r) => Ok(Response::new(r)),
        Err(Delivery::QueueFull) => Err(Status::with_error_details(
            Code::ResourceExhausted,
            "faultline engine queue is full; retry later",
            ErrorDetails::with_retry_info(Some(RETRY_AFTER)),
        )),
        Err(Delivery::Closed) | Err(Delivery::Accepted { .. }) => {
            Err(Status::unavailable("faultline is shutting down"))
        }
    }
}

/// Passes the raw message bytes through so the handler decodes (and counts failures).
struct RawCodec<R>(PhantomData<fn() -> R>);

struct MessageEncoder<R>(PhantomData<fn() -> R>);
struct BytesDecoder;

impl<R: Message + Send + 'static> Encoder for MessageEncoder<R> {
    type Item = R;
    type Error = Status;
    fn encode(&mut self, item: R, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(dst)
            .map_err(|e| Status::internal(format!("encoding the response: {e}")))
    }
}

impl Decoder for BytesDecoder {
    type Item = Bytes;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

impl<R: Message + Send + 'static> Codec for RawCodec<R> {
    type Encode = R;
    type Decode = Bytes;
    type Encoder = MessageEncoder<R>;
    type Decoder = BytesDecoder;
    fn encoder(&mut self) -> Self::Encoder {
        MessageEncoder(PhantomData)
    }
    fn decoder(&mut self) -> Self::Decoder {
        BytesDecoder
    }
}

/// The unary handler: protobuf decode, then the shared ingest path.
struct Export<S> {
    ingest: Ingest,
    /// Set when tonic handed over a message: a failed request this stays false for was
    /// refused by tonic's framing or decompression, before our code saw it.
    reached: Arc<AtomicBool>,
    _signal: PhantomData<fn() -> S>,
}

impl<S: Signal> UnaryService<Bytes> for Export<S> {
    type Response = S::Resp;
    type Future = Ready<Result<Response<S::Resp>, Status>>;
    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        self.reached.store(true, Ordering::Relaxed);
        let body = request.into_inner();
        if let Some(outcome) = S::handle_bytes(&self.ingest, &body) {
            return ready(to_status(outcome));
        }
        let result = match S::Req::decode(body) {
            Ok(req) => to_status(S::handle(&self.ingest, &req)),
            Err(e) => {
                count_malformed(&self.ingest.sender);
                Err(Status::invalid_argument(format!(
                    "malformed OTLP protobuf message: {e}"
                )))
            }
        };
        ready(result)
    }
}

/// A tower service routing `/<SERVICE>/Export` of one signal.
pub(crate) struct SignalServer<S> {
    ingest: Ingest,
    max_request_bytes: usize,
    _signal: PhantomData<fn() -> S>,
}

impl<S> Clone for SignalServer<S> {
    fn clone(&self) -> Self {
        Self {
            ingest: self.ingest.clone(),
            max_request_bytes: self.max_request_bytes,
            _signal: PhantomData,
        }
    }
}

impl<S: Signal> SignalServer<S> {
    pub(crate) fn new(ingest: Ingest, max_request_bytes: usize) -> Self {
        Self {
            ingest,
            max_request_bytes,
            _signal: PhantomData,
        }
    }
}

impl<S: Signal> NamedService for SignalServer<S> {
    const NAME: &'static str = S::SERVICE;
}

impl<S, B> Service<http::Request<B>> for SignalServer<S>
where
    S: Signal,
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let is_export = req
            .uri()
            .path()
            .strip_prefix('/')
            .and_then(|p| p.strip_suffix("/Export"))
            == Some(S::SERVICE);
        if !is_export {
            return Box::pin(async {
                Ok(Status::unimplemented("only Export is served").into_http())
            });
        }
        let ingest = self.ingest.clone();
        let max = self.max_request_bytes;
        Box::pin(async move {
            // Waiting here holds the stream, not its message: the body is read below.
            let _permit = ingest.in_flight.clone().acquire_owned().await.ok();
            let mut accept = EnabledCompressionEncodings::default();
            accept.enable(CompressionEncoding::Gzip);
            let mut grpc = Grpc::new(RawCodec::<S::Resp>(PhantomData))
                .apply_compression_config(accept, EnabledCompressionEncodings::default())
                .apply_max_message_size_config(Some(max), None);
            let reached = Arc::new(AtomicBool::new(false));
            let export = Export::<S> {
                ingest: ingest.clone(),
                reached: reached.clone(),
                _signal: PhantomData,
            };
            let response = grpc.unary(export, req).await;
            if reached.load(Ordering::Relaxed) {
                return Ok(response);
            }
            let status = response
                .headers()
                .get(Status::GRPC_STATUS)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<i32>().ok())
                .map(Code::from_i32);
            let Some(refusal) = status.and_then(|code| codec_refusal(code, max)) else {
                return Ok(response);
            };
            match refusal.code() {
                Code::ResourceExhausted => {
                    ingest.sender.stats().add_dropped(DropReason::TooLarge, 1);
                }
                _ => count_malformed(&ingest.sender),
            }
            Ok(refusal.into_http())
        })
    }
}

/// The status that replaces tonic's for a request its codec refused (`None`: leave it).
///
/// tonic answers a message over the size limit `OUT_OF_RANGE`, which OTLP clients retry
/// (a request that can never fit would be resent until the client gives up), and one that
/// only inflates past it, or whose gzip is corrupt, `RESOURCE_EXHAUSTED` or `INTERNAL`,
/// neither of which faultline counted. Too large becomes `RESOURCE_EXHAUSTED` without
/// `RetryInfo` (gRPC's code for a size limit, and final for OTLP clients); a corrupt
/// frame becomes `INVALID_ARGUMENT`, as a malformed protobuf message is.
fn codec_refusal(code: Code, max_request_bytes: usize) -> Option<Status> {
    match code {
        Code::OutOfRange | Code::ResourceExhausted => Some(Status::resource_exhausted(format!(
            "request larger than faultline's max_request_bytes ({max_request_bytes} bytes, \
             after decompression); send smaller batches"
        ))),
        Code::Internal => Some(Status::invalid_argument(
            "malformed gRPC message: corrupt compression or framing",
        )),
        _ => None,
    }
}

/// Serves the three signals until `shutdown` resolves.
pub(crate) async fn serve(
    listener: TcpListener,
    ingest: Ingest,
    max_request_bytes: usize,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    tonic::transport::Server::builder()
        .add_service(SignalServer::<Logs>::new(ingest.clone(), max_request_bytes))
        .add_service(SignalServer::<Traces>::new(
            ingest.clone(),
            max_request_bytes,
        ))
        .add_service(SignalServer::<Metrics>::new(ingest, max_request_bytes))
        .serve_with_incoming_shutdown(TcpIncoming::from(listener), shutdown)
        .await
}
