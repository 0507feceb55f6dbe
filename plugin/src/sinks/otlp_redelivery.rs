//! Keeps the OTLP push sink's verdict records until a collector takes them.
//!
//! A verdict record is sent once, when a target's verdict changes: if it is lost, the
//! collector's side never hears of that verdict. The SDK's exporter retries a failed export
//! for a few seconds only (opentelemetry-otlp 0.33: 3 retries, 0.1–1.6 s apart), less than a
//! collector restart or a network blip takes. [`Redelivery`] keeps the records of a failed
//! export (at most [`MAX_PENDING`]; past that the oldest are dropped and counted) and sends
//! them again, ahead of newer ones, with the next export or on its own timer: 5 s after the
//! failure, backing off to once a minute while the collector stays away.
//!
//! Metrics need none of this: each push carries the cumulative values, so the next
//! successful push repairs a lost one.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use opentelemetry::logs::Severity;
use opentelemetry::InstrumentationScope;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::logs::{LogBatch, LogExporter, SdkLogRecord};
use opentelemetry_sdk::Resource;
use tokio::sync::Notify;

use crate::pipeline::telemetry::Telemetry;

/// Verdict records kept for redelivery; one per verdict change, so 1,024 is hours of a
/// flapping fleet's verdicts, and a few hundred KiB.
pub const MAX_PENDING: usize = 1024;
/// First redelivery after a failure: a restarting collector is usually back by then.
const RETRY_FIRST: Duration = Duration::from_secs(5);
/// Longest wait between redeliveries while the collector stays away.
const RETRY_MAX: Duration = Duration::from_secs(60);

type Owned = (SdkLogRecord, InstrumentationScope);

/// A log exporter whose failed records are sent again (see the module docs).
#[derive(Debug)]
pub struct Redelivery<E> {
    core: Arc<Core<E>>,
}

/// The redelivery side of a [`Redelivery`]: its timer and the last attempt at shutdown.
#[derive(Debug)]
pub struct RedeliveryHandle<E> {
    core: Arc<Core<E>>,
}

#[derive(Debug)]
struct Core<E> {
    inner: E,
    /// Oldest first.
    pending: Mutex<VecDeque<Owned>>,
    telemetry: Arc<Telemetry>,
    /// Wakes the timer when records become pending.
    wake: Notify,
}

impl<E: LogExporter> Redelivery<E> {
    /// Wraps `inner`. Its resource must already be set: the SDK sets it on the exporter it
    /// is given after [`Redelivery::handle`] shares `inner`, too late to reach it.
    pub fn new(inner: E, telemetry: Arc<Telemetry>) -> Self {
        Self {
            core: Arc::new(Core {
                inner,
                pending: Mutex::new(VecDeque::new()),
                telemetry,
                wake: Notify::new(),
            }),
        }
    }

    /// The handle that runs the redelivery timer and the last attempt at shutdown.
    pub fn handle(&self) -> RedeliveryHandle<E> {
        RedeliveryHandle {
            core: self.core.clone(),
        }
    }
}

impl<E: LogExporter> LogExporter for Redelivery<E> {
    async fn export(&self, batch: LogBatch<'_>) -> OTelSdkResult {
        let newer: Vec<(&SdkLogRecord, &InstrumentationScope)> = batch.iter().collect();
        let older = self.core.take();
        self.core.send(older, &newer).await
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.core.inner.shutdown_with_timeout(timeout)
    }

    fn event_enabled(&self, level: Severity, target: &str, name: Option<&str>) -> bool {
        self.core.inner.event_enabled(level, target, name)
    }

    fn set_resource(&mut self, resource: &Resource) {
        // Only reachable before a handle shares the exporter (see `new`).
        if let Some(core) = Arc::get_mut(&mut self.core) {
            core.inner.set_resource(resource);
        }
    }
}

impl<E: LogExporter> RedeliveryHandle<E> {
    /// Sends pending records 5 s after they became pending, then backs off (doubling, at
    /// most a minute apart) while the collector refuses them. Runs until aborted.
    pub async fn run(self) {
        let mut delay = RETRY_FIRST;
        loop {
            if self.core.pending_len() == 0 {
                // A permit stored by a `keep` since the check makes this return at once.
                self.core.wake.notified().await;
                delay = RETRY_FIRST;
                continue;
            }
            tokio::time::sleep(delay).await;
            let older = self.core.take();
            if older.is_empty() {
                continue;
            }
            delay = match self.core.send(older, &[]).await {
                Ok(()) => RETRY_FIRST,
                Err(_) => (delay * 2).min(RETRY_MAX),
            };
        }
    }

    /// One more attempt at the pending records (at shutdown); returns how many are still
    /// pending after it.
    pub async fn flush(&self) -> usize {
        let older = self.core.take();
        if !older.is_empty() {
            // A failure is counted by the inner exporter and leaves the records pending.
            let _ = self.core.send(older, &[]).await;
        }
        self.core.pending_len()
    }

    /// Gives up on the records still pending (the sink is stopping): counts them as lost
    /// and returns how many there were.
    pub fn abandon(&self) -> usize {
        let n = self.core.take().len();
        self.core.telemetry.add_otlp_verdicts_lost(n as u64);
        self.core.telemetry.set_otlp_verdicts_pending(0);
        n
    }
}

impl<E: LogExporter> Core<E> {
    fn lock(&self) -> MutexGuard<'_, VecDeque<Owned>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn pending_len(&self) -> usize {
        self.lock().len()
    }

    fn take(&self) -> Vec<Owned> {
        let mut p = self.lock();
        // The gauge keeps counting them while they are in flight: a retry that fails again
        // must not show as a moment of nothing pending.
        p.drain(..).collect()
    }

    /// Exports `older` (taken from pending) then `newer` in one batch; on failure keeps all
    /// of them pending, ahead of any records that became pending meanwhile. Cancel-safe:
    /// dropped mid-export (a shutdown's time limit), it keeps `older` pending too.
    async fn send(
        &self,
        older: Vec<Owned>,
        newer: &[(&SdkLogRecord, &InstrumentationScope)],
    ) -> OTelSdkResult {
        let mut unsent = Unsent {
            core: self,
            records: older,
        };
        let result = {
            let refs: Vec<(&SdkLogRecord, &InstrumentationScope)> = unsent
                .records
                .iter()
                .map(|(r, s)| (r, s))
                .chain(newer.iter().copied())
                .collect();
            if refs.is_empty() {
                return Ok(());
            }
            self.inner.export(LogBatch::new(&refs)).await
        };
        if result.is_ok() {
            unsent.records.clear();
            self.telemetry
                .set_otlp_verdicts_pending(self.pending_len() as u64);
        } else {
            let copies = newer.iter().map(|(r, s)| ((*r).clone(), (*s).clone()));
            unsent.records.extend(copies);
        }
        // Dropping `unsent` keeps what it still holds.
        result
    }

    fn keep(&self, failed: Vec<Owned>) {
        let mut p = self.lock();
        for rec in failed.into_iter().rev() {
            p.push_front(rec);
        }
        let over = p.len().saturating_sub(MAX_PENDING);
        if over > 0 {
            p.drain(..over);
            let lost = self.telemetry.add_otlp_verdicts_lost(over as u64);
            if lost == over as u64 {
                tracing::warn!(
                    kept = MAX_PENDING,
                    "OTLP collector unreachable for long: the oldest undelivered verdict records are being dropped (counted in faultline_otlp_verdict_records_lost_total)"
                );
            }
        }
        self.telemetry.set_otlp_verdicts_pending(p.len() as u64);
        drop(p);
        self.wake.notify_one();
    }
}

/// Records taken for an export that has not succeeded: kept pending again when dropped.
struct Unsent<'a, E: LogExporter> {
    core: &'a Core<E>,
    records: Vec<Owned>,
}

impl<E: LogExporter> Drop for Unsent<'_, E> {
    fn drop(&mut self) {
        if !self.records.is_empty() {
            self.core.keep(std::mem::take(&mut self.records));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::logs::{LogRecord, Logger, LoggerProvider};
    use opentelemetry_sdk::error::OTelSdkError;
    use opentelemetry_sdk::logs::SdkLoggerProvider;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Refuses the first `fail` exports, then records the bodies it was given.
    #[derive(Clone, Debug, Default)]
    struct Flaky {
        fail: Arc<AtomicUsize>,
        got: Arc<Mutex<Vec<String>>>,
    }

    impl LogExporter for Flaky {
        async fn export(&self, batch: LogBatch<'_>) -> OTelSdkResult {
            if self
                .fail
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(OTelSdkError::InternalFailure("collector down".into()));
            }
            let mut got = self.got.lock().unwrap();
            got.extend(
                batch
                    .iter()
                    .map(|(r, _)| format!("{:?}", r.body().expect("a body"))),
            );
            Ok(())
        }
    }

    /// `n` owned records with bodies "0", "1", …, made by a real SDK logger.
    fn records(n: usize) -> Vec<Owned> {
        let provider = SdkLoggerProvider::builder().build();
        let logger = provider.logger("test");
        (0..n)
            .map(|i| {
                let mut r = logger.create_log_record();
                r.set_body(i.to_string().into());
                (r, InstrumentationScope::builder("test").build())
            })
            .collect()
    }

    fn refs(owned: &[Owned]) -> Vec<(&SdkLogRecord, &InstrumentationScope)> {
        owned.iter().map(|(r, s)| (r, s)).collect()
    }

    fn bodies(range: std::ops::Range<usize>) -> Vec<String> {
        range
            .map(|i| format!("{:?}", opentelemetry::logs::AnyValue::from(i.to_string())))
            .collect()
    }

    #[tokio::test]
    async fn refused_records_go_out_first_with_the_next_export() {
        let flaky = Flaky::default();
        flaky.fail.store(1, Ordering::SeqCst);
        let t = Arc::new(Telemetry::default());
        let exporter = Redelivery::new(flaky.clone(), t.clone());
        let all = records(3);
        assert!(exporter
            .export(LogBatch::new(&refs(&all[..2])))
            .await
            .is_err());
        assert_eq!(t.otlp_verdicts_pending(), 2);
        assert!(flaky.got.lock().unwrap().is_empty());
        exporter
            .export(LogBatch::new(&refs(&all[2..])))
            .await
            .expect("the collector is back");
        assert_eq!(*flaky.got.lock().unwrap(), bodies(0..3));
        assert_eq!(t.otlp_verdicts_pending(), 0);
        assert_eq!(t.otlp_verdicts_lost(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_timer_sends_them_when_no_new_record_comes() {
        let flaky = Flaky::default();
        // The first export and the first timed retry are refused.
        flaky.fail.store(2, Ordering::SeqCst);
        let t = Arc::new(Telemetry::default());
        let exporter = Redelivery::new(flaky.clone(), t.clone());
        let timer = tokio::spawn(exporter.handle().run());
        let all = records(2);
        assert!(exporter.export(LogBatch::new(&refs(&all))).await.is_err());
        tokio::time::sleep(RETRY_FIRST + Duration::from_millis(100)).await;
        assert!(flaky.got.lock().unwrap().is_empty(), "refused at 5 s");
        assert_eq!(t.otlp_verdicts_pending(), 2);
        // Backed off to 10 s after the second refusal.
        tokio::time::sleep(2 * RETRY_FIRST).await;
        assert_eq!(*flaky.got.lock().unwrap(), bodies(0..2));
        assert_eq!(t.otlp_verdicts_pending(), 0);
        timer.abort();
    }

    #[tokio::test]
    async fn past_the_cap_the_oldest_are_dropped_and_counted() {
        let flaky = Flaky::default();
        flaky.fail.store(usize::MAX, Ordering::SeqCst);
        let t = Arc::new(Telemetry::default());
        let exporter = Redelivery::new(flaky.clone(), t.clone());
        let all = records(MAX_PENDING + 5);
        assert!(exporter.export(LogBatch::new(&refs(&all))).await.is_err());
        assert_eq!(t.otlp_verdicts_pending(), MAX_PENDING as u64);
        assert_eq!(t.otlp_verdicts_lost(), 5);
        flaky.fail.store(0, Ordering::SeqCst);
        let handle = exporter.handle();
        assert_eq!(handle.flush().await, 0);
        assert_eq!(*flaky.got.lock().unwrap(), bodies(5..MAX_PENDING + 5));
    }

    /// Never answers: an export to it only ends by being dropped.
    #[derive(Debug)]
    struct BlackHole;

    impl LogExporter for BlackHole {
        async fn export(&self, _batch: LogBatch<'_>) -> OTelSdkResult {
            std::future::pending().await
        }
    }

    #[tokio::test]
    async fn a_redelivery_cut_short_keeps_its_records() {
        let t = Arc::new(Telemetry::default());
        let exporter = Redelivery::new(BlackHole, t.clone());
        let all = records(2);
        let handle = exporter.handle();
        handle.core.keep(all);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), handle.flush())
                .await
                .is_err(),
            "the black hole never answers"
        );
        assert_eq!(handle.core.pending_len(), 2);
        assert_eq!(t.otlp_verdicts_pending(), 2);
        assert_eq!(handle.abandon(), 2);
    }

    #[tokio::test]
    async fn records_still_pending_at_shutdown_are_counted_lost() {
        let flaky = Flaky::default();
        flaky.fail.store(usize::MAX, Ordering::SeqCst);
        let t = Arc::new(Telemetry::default());
        let exporter = Redelivery::new(flaky, t.clone());
        let all = records(3);
        assert!(exporter.export(LogBatch::new(&refs(&all))).await.is_err());
        let handle = exporter.handle();
        assert_eq!(handle.flush().await, 3);
        assert_eq!(handle.abandon(), 3);
        assert_eq!(t.otlp_verdicts_pending(), 0);
        assert_eq!(t.otlp_verdicts_lost(), 3);
    }
}
