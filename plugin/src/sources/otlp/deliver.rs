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
///
/// All or nothing: a request is queued whole or refused whole (its events then count as
/// `queue_full`), so a client retrying a refused request never gets events analysed twice,
/// and every attempt's received events are either queued or counted as dropped.
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
    let batches = decoded.batches.len();
    match sender.try_send_all(decoded.batches) {
        Ok(()) => Delivery::Accepted {
            rejected: decoded.rejected,
            message,
        },
        Err(SendError::Full) => {
            if batches > sender.capacity() {
                tracing::warn!(
                    batches,
                    queue_capacity = sender.capacity(),
                    "an OTLP request needs more batches than the engine queue holds and can never be queued; raise [pipeline] queue_capacity or send smaller requests"
                );
            }
            Delivery::QueueFull
        }
        Err(SendError::Closed) => Delivery::Closed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EventBatch, ProcessInfo};
    use crate::pipeline::queue;
    use crate::pipeline::telemetry::SourceStats;
    use faultline_engine::{SyscallEvent, SyscallId};
    use std::sync::Arc;

    fn batch(pid: u32, events: usize) -> EventBatch {
        let read = SyscallId::from_name("read");
        EventBatch {
            source: "otlp_http",
            process: ProcessInfo {
                pid: Some(pid),
                ..ProcessInfo::default()
            },
            events: (0..events)
                .map(|i| SyscallEvent::complete(pid, pid, read, i as u64, 10))
                .collect(),
        }
    }

    fn request() -> Decoded {
        Decoded {
            batches: vec![batch(1, 3), batch(2, 4)],
            events: 7,
            ..Decoded::default()
        }
    }

    #[test]
    fn a_request_is_queued_whole_or_refused_whole() {
        let stats = Arc::new(SourceStats::new("otlp_http"));
        let (tx, mut rx) = queue::bounded(2);
        let sender = BatchSender::new(tx, stats.clone());
        let counters = OtlpCounters::default();
        // One slot taken: the two-batch request does not fit.
        sender.try_send(batch(9, 1)).unwrap();
        assert_eq!(deliver(&sender, &counters, request()), Delivery::QueueFull);
        assert_eq!(stats.dropped(DropReason::QueueFull), 7);
        assert_eq!(rx.try_recv().map(|b| b.process.pid), Ok(Some(9)));
        assert!(
            rx.try_recv().is_err(),
            "no part of the refused request was queued"
        );
        // The client's retry is queued whole, once.
        assert!(matches!(
            deliver(&sender, &counters, request()),
            Delivery::Accepted { rejected: 0, .. }
        ));
        let queued: Vec<_> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|b| b.process.pid)
            .collect();
        assert_eq!(queued, [Some(1), Some(2)]);
        // Every attempt's events were received, and either queued or dropped.
        assert_eq!(stats.received(), 14);
        assert_eq!(stats.dropped(DropReason::QueueFull), 7);
    }
}
