//! Sinks: everything that publishes reports and counters.

pub mod http;
pub mod jsonl;
pub mod names;
pub mod otlp;
pub mod otlp_failures;
pub mod otlp_redelivery;
pub mod prometheus;
