//! Hands decoded batches to the engine queue and books every outcome in the counters, so
//! the gRPC and HTTP front ends only translate the result into their status codes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::convert::Decoded;
use crate::pipeline::queue::{BatchSender, SendError};
use crate::pipeline::telemetry::{DropReason, SegmentCounts};
use crate::pipeline::warn_limit::WarnLimit;

/// OTLP-specific tallies that have no slot in [`crate::pipeline::telemetry::SourceStats`].
#[derive(Debug, Default)]
pub struct OtlpCounters {
    not_syscall: AtomicU64,
    unused_metric_points: AtomicU64,
    /// Warnings about requests larger than the engine queue (one per minute at most).
    oversized: Mutex<Option<WarnLimit>>,
    /// Warnings about segment readings that lost a half (one per minute at most).
    unpaired: Mutex<Option<WarnLimit>>,
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
    // Counted once the request is taken: a refused one leaves the segment series as they
    // were (`Ingest::metrics` rolls them back), so its retry finds and counts them again.
    let segments = SegmentCounts {
        points: decoded.segment_points,
        unpaired: decoded.unpaired_segment_points,
        gaps: decoded.segment_gaps,
        forgotten: decoded.forgotten_segment_series,
    };
    let delivery = queue(sender, counters, decoded);
    if matches!(delivery, Delivery::Accepted { .. }) {
        stats.segments().add(segments);
        if segments.unpaired > 0 {
            warn_unpaired(counters, segments.unpaired);
        }
    }
    delivery
}

/// The queueing half of [`deliver`]: all or nothing, or a prefix as partial success when
/// the request can never fit.
fn queue(sender: &BatchSender, counters: &OtlpCounters, decoded: Decoded) -> Delivery {
    let message = decoded.error_message();
    let batches = decoded.batches.len();
    if batches > sender.capacity() {
        // Never queueable whole: "retry later" would be refused on every retry and lose
        // it all. Queue what fits and reject the rest as partial success, which clients
        // do not retry (so nothing is analysed twice either).
        return match sender.try_send_prefix(decoded.batches) {
            Ok(left_out) => {
                warn_oversized(counters, batches, sender.capacity(), left_out);
                let why = format!(
                    "{left_out} records not analysed: the request made {batches} batches \
                     (one per process and host), more than the engine queue holds ({})",
                    sender.capacity()
                );
                Delivery::Accepted {
                    rejected: decoded.rejected.saturating_add(left_out),
                    message: if message.is_empty() {
                        why
                    } else {
                        format!("{message}; {why}")
                    },
                }
            }
            Err(_) => Delivery::Closed,
        };
    }
    match sender.try_send_all(decoded.batches) {
        Ok(()) => Delivery::Accepted {
            rejected: decoded.rejected,
            message,
        },
        Err(SendError::Full) => Delivery::QueueFull,
        Err(SendError::Closed) => Delivery::Closed,
    }
}

/// Logs, at most once a minute, that segment readings came without their other half.
fn warn_unpaired(counters: &OtlpCounters, points: u64) {
    let mut limit = counters.unpaired.lock().unwrap_or_else(|p| p.into_inner());
    let limit = limit.get_or_insert_with(|| WarnLimit::new(Duration::from_secs(60)));
    if let Some(suppressed) = limit.occurred(Instant::now()) {
        tracing::warn!(
            points,
            suppressed,
            tolerance_ms = super::segment_metrics::PAIR_TOLERANCE_NS / 1_000_000,
            "TCP segment metric points came without their other half (sent and retransmitted \
             of one reading need the same series and times at most tolerance_ms apart): those \
             samples are lost to the packet-loss test; send both metrics in each export"
        );
    }
}

/// Logs, at most once a minute, that a request did not fit the engine queue.
fn warn_oversized(counters: &OtlpCounters, batches: usize, capacity: usize, left_out: u64) {
    let mut limit = counters.oversized.lock().unwrap_or_else(|p| p.into_inner());
    let limit = limit.get_or_insert_with(|| WarnLimit::new(Duration::from_secs(60)));
    if let Some(suppressed) = limit.occurred(Instant::now()) {
        tracing::warn!(
            batches,
            queue_capacity = capacity,
            records_rejected = left_out,
            suppressed,
            "an OTLP request made more batches than the engine queue holds: what did not fit \
             was rejected (partial success); raise [pipeline] queue_capacity or send fewer \
             processes per request"
        );
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

    /// An OTLP sender on a queue of two batches, and its counters.
    fn queue_of_two() -> (
        Arc<SourceStats>,
        queue::BatchReceiver,
        BatchSender,
        OtlpCounters,
    ) {
        let stats = Arc::new(SourceStats::new("otlp_http"));
        let (tx, rx) = queue::bounded(2);
        let sender = BatchSender::new(tx, stats.clone());
        (stats, rx, sender, OtlpCounters::default())
    }

    /// The pids of the batches queued, in order (emptying the queue).
    fn queued_pids(rx: &mut queue::BatchReceiver) -> Vec<Option<u32>> {
        std::iter::from_fn(|| rx.try_recv().ok())
            .map(|b| b.process.pid)
            .collect()
    }

    #[test]
    fn a_request_is_queued_whole_or_refused_whole() {
        let (stats, mut rx, sender, counters) = queue_of_two();
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
        assert_eq!(queued_pids(&mut rx), [Some(1), Some(2)]);
        // Every attempt's events were received, and either queued or dropped.
        assert_eq!(stats.received(), 14);
        assert_eq!(stats.dropped(DropReason::QueueFull), 7);
    }

    #[test]
    fn a_request_larger_than_the_queue_is_taken_in_part_not_refused_forever() {
        let (stats, mut rx, sender, counters) = queue_of_two();
        // Three processes: three batches for a queue of two.
        let big = Decoded {
            batches: vec![batch(1, 3), batch(2, 4), batch(3, 5)],
            events: 12,
            ..Decoded::default()
        };
        match deliver(&sender, &counters, big) {
            Delivery::Accepted { rejected, message } => {
                assert_eq!(
                    rejected, 5,
                    "the batch that did not fit, as partial success"
                );
                assert!(
                    message.contains("more than the engine queue holds"),
                    "{message}"
                );
            }
            other => panic!("a retryable answer would be refused on every retry: {other:?}"),
        }
        assert_eq!(queued_pids(&mut rx), [Some(1), Some(2)]);
        assert_eq!(stats.received(), 12);
        assert_eq!(stats.dropped(DropReason::QueueFull), 5);
    }

    #[test]
    fn segment_tallies_count_once_per_request_taken_not_per_attempt() {
        let (stats, mut rx, sender, counters) = queue_of_two();
        let tallied = || Decoded {
            segment_points: 9,
            unpaired_segment_points: 2,
            segment_gaps: 3,
            forgotten_segment_series: 4,
            ..request()
        };
        // Refused (one slot taken): its series are rolled back, so nothing counts yet.
        sender.try_send(batch(9, 1)).unwrap();
        assert_eq!(deliver(&sender, &counters, tallied()), Delivery::QueueFull);
        assert_eq!(stats.segments().get(), SegmentCounts::default());
        let _ = rx.try_recv();
        // The retry is taken and counted, once.
        assert!(matches!(
            deliver(&sender, &counters, tallied()),
            Delivery::Accepted { .. }
        ));
        let want = SegmentCounts {
            points: 9,
            unpaired: 2,
            gaps: 3,
            forgotten: 4,
        };
        assert_eq!(stats.segments().get(), want);
    }
}
