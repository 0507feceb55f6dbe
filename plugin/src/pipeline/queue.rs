//! The bounded queue between sources and the engine: memory is capped by
//! `capacity × MAX_BATCH_EVENTS` events, and every batch that does not fit is counted.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::telemetry::{DropReason, SourceStats};
use crate::model::EventBatch;

/// The receiving end, held by the engine task.
pub type BatchReceiver = mpsc::Receiver<EventBatch>;

/// A source's handle on the queue; drops are counted against that source.
#[derive(Clone, Debug)]
pub struct BatchSender {
    tx: mpsc::Sender<EventBatch>,
    stats: Arc<SourceStats>,
}

/// The queue was full (push sources answer "retry later") or the engine is gone.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SendError {
    #[error("engine queue is full")]
    Full,
    #[error("engine queue is closed (shutting down)")]
    Closed,
}

/// A queue holding at most `capacity` batches.
pub fn bounded(capacity: usize) -> (mpsc::Sender<EventBatch>, BatchReceiver) {
    mpsc::channel(capacity.max(1))
}

impl BatchSender {
    pub fn new(tx: mpsc::Sender<EventBatch>, stats: Arc<SourceStats>) -> Self {
        Self { tx, stats }
    }

    /// This sender's source counters.
    pub fn stats(&self) -> &Arc<SourceStats> {
        &self.stats
    }

    /// Non-blocking send for push sources: a full queue drops the batch (counted) so the
    /// caller can tell its client to retry instead of buffering without bound.
    pub fn try_send(&self, batch: EventBatch) -> Result<(), SendError> {
        let n = batch.events.len() as u64;
        match self.tx.try_send(batch) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.stats.add_dropped(DropReason::QueueFull, n);
                Err(SendError::Full)
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(SendError::Closed),
        }
    }

    /// Non-blocking all-or-nothing send of one request's batches for push sources: the
    /// queue takes all of them or none (all counted as `queue_full`). A client told to
    /// retry resends the whole request, so queueing part of it would analyse that part
    /// twice. A request of more batches than the queue holds can never be taken.
    pub fn try_send_all(&self, batches: Vec<EventBatch>) -> Result<(), SendError> {
        if batches.is_empty() {
            return Ok(());
        }
        match self.tx.try_reserve_many(batches.len()) {
            Ok(permits) => {
                for (permit, batch) in permits.zip(batches) {
                    permit.send(batch);
                }
                Ok(())
            }
            Err(mpsc::error::TrySendError::Full(())) => {
                let n: u64 = batches.iter().map(|b| b.events.len() as u64).sum();
                self.stats.add_dropped(DropReason::QueueFull, n);
                Err(SendError::Full)
            }
            Err(mpsc::error::TrySendError::Closed(())) => Err(SendError::Closed),
        }
    }

    /// Non-blocking send of `batches` in order until the queue is full; returns the events
    /// of the batches that did not fit (counted as `queue_full`). For a request that can
    /// never be taken whole ([`BatchSender::try_send_all`] refuses it on every retry).
    pub fn try_send_prefix(&self, batches: Vec<EventBatch>) -> Result<u64, SendError> {
        let mut left = batches.into_iter();
        for batch in left.by_ref() {
            let n = batch.events.len() as u64;
            match self.try_send(batch) {
                Ok(()) => {}
                Err(SendError::Full) => {
                    // `try_send` counted the batch it could not queue; the rest are dropped too.
                    let rest: u64 = left.map(|b| b.events.len() as u64).sum();
                    self.stats.add_dropped(DropReason::QueueFull, rest);
                    return Ok(n + rest);
                }
                Err(SendError::Closed) => return Err(SendError::Closed),
            }
        }
        Ok(0)
    }

    /// Batches the queue holds at most.
    pub fn capacity(&self) -> usize {
        self.tx.max_capacity()
    }

    /// Waiting send for pull sources (files, pipes): backpressure slows the reader instead of dropping.
    pub async fn send(&self, batch: EventBatch) -> Result<(), SendError> {
        self.tx.send(batch).await.map_err(|_| SendError::Closed)
    }

    /// Waiting send from a blocking thread (decoders run in `spawn_blocking`).
    pub fn blocking_send(&self, batch: EventBatch) -> Result<(), SendError> {
        self.tx.blocking_send(batch).map_err(|_| SendError::Closed)
    }
}
