//! Between sources and the engine: bounded queues, target routing and drop accounting.

pub mod engine_task;
pub mod latest;
pub mod process_state;
pub mod quarantine;
pub mod queue;
pub mod reorder;
pub mod report_sink;
pub mod router;
pub mod runner;
pub mod silence;
pub mod source_tasks;
pub mod telemetry;
#[cfg(test)]
pub(crate) mod test_support;
pub mod trigger_wait;
pub mod warn_limit;
