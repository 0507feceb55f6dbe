//! Hands decoded batches to the engine queue and books every outcome in the counters, so
//! the gRPC and HTTP front ends only translate the result into their status codes.

use std::sync::atomic::{AtomicU64, Ordering};

use super::convert::Decoded;
use crate::pipeline::queue::{BatchSender, SendError};
use crate::pipeline::telemetry::DropReason;

/// OTLP-specific tallies that have no slot in [`crate::pipeline::telemetry::SourceStats`].
#[derive(Debug, Default)]
pub struct OtlpCounters {
    not_syscall: AtomicU64,
    unused_metric_points: AtomicU64,
}

impl OtlpCounters {
    /// Records that carried no syscall attribute (other telemetry sent to faultline).
    pub fn not_syscall(&self) -> u64 {
        self.not_syscall.load(Ordering::Relaxed)
    }
    /// Metric data points received and ignored (see docs/otlp-mapping.md).
    pub fn unused_metric_points(&self) -> u64 {
        self.unused_metric_points.load(Ordering::Relaxed)
    }
}

/// What the receiver answers its client.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// Everything usable was queued; `rejected` records go back as partial success.
    Accepted { rejected: u64, message: String },
    /// The engine queue is full: the client should retry later.
    QueueFull,
    /// The engine is shutting down.
    Closed,
}

/// Queues `decoded` and counts received events, rejected records and drops.
pub(crate) fn deliver(sender: &BatchSender, counters: &OtlpCounters, decoded: Decoded) -> Delivery {
    let stats = sender.stats();
    stats.add_received(decoded.events);
    stats.add_decode_errors(decoded.rejected);
    // Other telemetry sent to the same endpoint is not an error, but it is not analysed either.
    stats.add_dropped(
        DropReason::NotSyscall,
        decoded.not_syscall + decoded.unused_metric_points,
    );
    counters
        .not_syscall
        .fetch_add(decoded.not_syscall, Ordering::Relaxed);
    counters
        .unused_metric_points
        .fetch_add(decoded.unused_metric_points, Ordering::Relaxed);
    let message = decoded.error_message();
    let mut batches = decoded.batches.into_iter();
    while let Some(batch) = batches.next() {
        match sender.try_send(batch) {
            Ok(()) => {}
            Err(SendError::Full) => {
                // try_send counted the batch it refused; the rest of the request is dropped too.
                let rest: u64 = batches.map(|b| b.events.len() as u64).sum();
                stats.add_dropped(DropReason::QueueFull, rest);
                return Delivery::QueueFull;
            }
            Err(SendError::Closed) => return Delivery::Closed,
        }
    }
    Delivery::Accepted {
        rejected: decoded.rejected,
        message,
    }
}
