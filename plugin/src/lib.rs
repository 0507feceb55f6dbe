//! # faultline (plugin host)
//!
//! Data flows one way, and the modules say so:
//!
//! ```text
//! sources (OTLP gRPC/HTTP, LTTng via babeltrace2, perf script/trace)
//!    │  decode → faultline_engine::SyscallEvent, grouped per process
//!    ▼
//! pipeline (target routing, bounded queues, drop accounting)
//!    ▼
//! engine_host (the engine as a WASM module in wasmtime, or linked natively)
//!    │  faultline_engine::Report
//!    ▼
//! sinks (Prometheus /metrics, /report, JSON lines, OTLP push)
//! ```

pub mod cli;
pub mod commands;
pub mod config;
pub mod engine_host;
pub mod host_name;
pub mod model;
pub mod pipeline;
pub mod sinks;
pub mod sources;
pub mod time;
