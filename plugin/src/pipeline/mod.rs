//! Between sources and the engine: bounded queues, target routing and drop accounting.

pub mod queue;
pub mod telemetry;
