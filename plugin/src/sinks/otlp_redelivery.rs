//! Keeps the OTLP push sink's verdict records until a collector takes them.
//!
//! A verdict record is sent once, when a target's verdict changes: if it is lost, the
//! collector's side never hears of that verdict. The SDK's exporter retries a failed export
//! at most 3 times within about a second (opentelemetry-otlp 0.33's default policy; not at
//! all for errors it deems permanent), less than a collector restart or a network blip
//! takes. [`Redelivery`] keeps the records of a failed export (at most [`MAX_PENDING`];
//! past that the oldest are dropped and counted) and sends them again, oldest first, in
//! batches of at most [`CHUNK`]: after the next export that succeeds, or on its own timer
//! 5 s after a failure, backing off to once a minute while the collector stays away. New
//! records always go out on their own first, so a batch the collector keeps refusing never
//! holds back later verdicts.
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
/// Records per redelivery: the SDK's own largest batch (`max_export_batch_size`), so a
/// redelivery is never larger than a request the collector took before.
pub const CHUNK: usize = 512;
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

/// The redelivery timer of a [`Redelivery`] ([`RedeliveryHandle::run`]).
#[derive(Debug)]
pub struct RedeliveryHandle<E> {
    core: Arc<Core<E>>,
}

/// What is still undelivered when the sink stops: one last attempt, then the rest is
/// counted lost. Dropped without [`Undelivered::give_up`] (a shutdown cut short by its time
/// limit, a sink dropped without shutdown), it counts them all the same.
#[derive(Debug)]
pub struct Undelivered<E: LogExporter> {
    core: Arc<Core<E>>,
    counted: bool,
}

#[derive(Debug)]
struct Core<E> {
    inner: E,
    state: Mutex<Pending>,
    /// One send at a time (the SDK's batch thread and the timer task): records go back to
    /// the queue in the order they were kept. A Tokio mutex works from both.
    sending: tokio::sync::Mutex<()>,
    telemetry: Arc<Telemetry>,
    /// Wakes the timer when records become pending.
    wake: Notify,
}

#[derive(Debug, Default)]
struct Pending {
    /// Oldest first.
    records: VecDeque<Owned>,
    /// Taken for a redelivery that has not ended yet: still counted as pending, so a retry
    /// that fails again does not show as a moment of nothing pending.
    in_flight: usize,
}

impl<E: LogExporter> Redelivery<E> {
    /// Wraps `inner`. Its resource must already be set: the SDK sets it on the exporter it
    /// is given after [`Redelivery::handle`] shares `inner`, too late to reach it.
    pub fn new(inner: E, telemetry: Arc<Telemetry>) -> Self {
        Self {
            core: Arc::new(Core {
                inner,
                state: Mutex::new(Pending::default()),
                sending: tokio::sync::Mutex::new(()),
                telemetry,
                wake: Notify::new(),
            }),
        }
    }

    /// The handle that runs the redelivery timer.
    pub fn handle(&self) -> RedeliveryHandle<E> {
        RedeliveryHandle {
            core: self.core.clone(),
        }
    }

    /// The account of what is left undelivered at the end (one per sink).
    pub fn undelivered(&self) -> Undelivered<E> {
        Undelivered {
            core: self.core.clone(),
            counted: false,
        }
    }
}

impl<E: LogExporter> LogExporter for Redelivery<E> {
    async fn export(&self, batch: LogBatch<'_>) -> OTelSdkResult {
        let _one = self.core.sending.lock().await;
        let newer: Vec<(&SdkLogRecord, &InstrumentationScope)> = batch.iter().collect();
        let result = self.core.inner.export(LogBatch::new(&newer)).await;
        match result {
            Err(_) => self
                .core
                .keep(newer.iter().map(|(r, s)| ((*r).clone(), (*s).clone()))),
            // The collector is back: one batch of the kept records goes too.
            Ok(()) => {
                let _ = self.core.redeliver_chunk().await;
            }
        }
        result
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
            delay = if self.core.redeliver_all().await {
                RETRY_FIRST
            } else {
                (delay * 2).min(RETRY_MAX)
            };
        }
    }
}

impl<E: LogExporter> Undelivered<E> {
    /// One more attempt at the pending records (at shutdown); returns how many are still
    /// pending after it.
    pub async fn flush(&self) -> usize {
        self.core.redeliver_all().await;
        self.core.pending_len()
    }

    /// Gives up on the records still pending (the sink is stopping): counts them as lost
    /// and returns how many there were.
    pub fn give_up(mut self) -> usize {
        self.count_lost()
    }

    fn count_lost(&mut self) -> usize {
        if self.counted {
            return 0;
        }
        self.counted = true;
        let mut st = self.core.lock();
        let n = st.records.len() + st.in_flight;
        st.records.clear();
        st.in_flight = 0;
        self.core.telemetry.add_otlp_verdicts_lost(n as u64);
        self.core.telemetry.set_otlp_verdicts_pending(0);
        n
    }
}

impl<E: LogExporter> Drop for Undelivered<E> {
    fn drop(&mut self) {
        let lost = self.count_lost();
        if lost > 0 {
            tracing::warn!(
                lost,
                "verdict records never reached the OTLP collector (counted in faultline_otlp_verdict_records_lost_total)"
            );
        }
    }
}

impl<E: LogExporter> Core<E> {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn pending_len(&self) -> usize {
        let st = self.lock();
        st.records.len() + st.in_flight
    }

    /// Sends the pending records, a batch at a time, until none are left (true) or the
    /// collector refuses one (false).
    async fn redeliver_all(&self) -> bool {
        let _one = self.sending.lock().await;
        loop {
            match self.redeliver_chunk().await {
                Some(Ok(())) => continue,
                Some(Err(_)) => return false,
                None => return true,
            }
        }
    }

    /// Sends the oldest pending records (at most [`CHUNK`]), with the `sending` lock
    /// held; `None` when there were none. Cancel-safe: dropped mid-export (a shutdown's
    /// time limit), it puts them back.
    async fn redeliver_chunk(&self) -> Option<OTelSdkResult> {
        let mut chunk = InFlight {
            core: self,
            records: {
                let mut st = self.lock();
                let n = st.records.len().min(CHUNK);
                st.in_flight += n;
                st.records.drain(..n).collect()
            },
        };
        if chunk.records.is_empty() {
            return None;
        }
        let result = {
            let refs: Vec<(&SdkLogRecord, &InstrumentationScope)> =
                chunk.records.iter().map(|(r, s)| (r, s)).collect();
            self.inner.export(LogBatch::new(&refs)).await
        };
        if result.is_ok() {
            chunk.delivered();
        }
        // Otherwise dropping `chunk` puts its records back, ahead of the rest.
        Some(result)
    }

    /// Keeps the records of a failed export, after those kept before.
    fn keep(&self, failed: impl Iterator<Item = Owned>) {
        let mut st = self.lock();
        st.records.extend(failed);
        self.trim(&mut st);
        drop(st);
        self.wake.notify_one();
    }

    /// Drops the oldest records past [`MAX_PENDING`] (counted) and updates the gauge,
    /// under the lock so that the gauge is never stale.
    fn trim(&self, st: &mut Pending) {
        let over = (st.records.len() + st.in_flight).saturating_sub(MAX_PENDING);
        let over = over.min(st.records.len());
        if over > 0 {
            st.records.drain(..over);
            let lost = self.telemetry.add_otlp_verdicts_lost(over as u64);
            if lost == over as u64 {
                tracing::warn!(
                    kept = MAX_PENDING,
                    "OTLP collector unreachable for long: the oldest undelivered verdict records are being dropped (counted in faultline_otlp_verdict_records_lost_total)"
                );
            }
        }
        self.telemetry
            .set_otlp_verdicts_pending((st.records.len() + st.in_flight) as u64);
    }
}

/// Records taken for a redelivery that has not succeeded: put back at the front of the
/// queue when dropped.
struct InFlight<'a, E: LogExporter> {
    core: &'a Core<E>,
    records: Vec<Owned>,
}

impl<E: LogExporter> InFlight<'_, E> {
    fn delivered(&mut self) {
        let mut st = self.core.lock();
        st.in_flight = st.in_flight.saturating_sub(self.records.len());
        self.records.clear();
        self.core.trim(&mut st);
    }
}

impl<E: LogExporter> Drop for InFlight<'_, E> {
    fn drop(&mut self) {
        if self.records.is_empty() {
            return;
        }
        let mut st = self.core.lock();
        st.in_flight = st.in_flight.saturating_sub(self.records.len());
        for rec in std::mem::take(&mut self.records).into_iter().rev() {
            st.records.push_front(rec);
        }
        self.core.trim(&mut st);
        drop(st);
        self.core.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::logs::{LogRecord, Logger, LoggerProvider};
    use opentelemetry_sdk::error::OTelSdkError;
    use opentelemetry_sdk::logs::SdkLoggerProvider;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Refuses the first `fail` exports, and any batch holding the body `poison`; records
    /// the bodies of the batches it takes.
    #[derive(Clone, Debug, Default)]
    struct Flaky {
        fail: Arc<AtomicUsize>,
        poison: Option<String>,
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
            let bodies: Vec<String> = batch
                .iter()
                .map(|(r, _)| format!("{:?}", r.body().expect("a body")))
                .collect();
            if let Some(p) = &self.poison {
                if bodies.contains(&body(p)) {
                    return Err(OTelSdkError::InternalFailure("413 too large".into()));
                }
            }
            self.got.lock().unwrap().extend(bodies);
            Ok(())
        }
    }

    /// Never answers: an export to it only ends by being dropped.
    #[derive(Debug)]
    struct BlackHole;

    impl LogExporter for BlackHole {
        async fn export(&self, _batch: LogBatch<'_>) -> OTelSdkResult {
            std::future::pending().await
        }
    }

    /// Owned records with these bodies, made by a real SDK logger.
    fn records_named(names: &[&str]) -> Vec<Owned> {
        let provider = SdkLoggerProvider::builder().build();
        let logger = provider.logger("test");
        names
            .iter()
            .map(|name| {
                let mut r = logger.create_log_record();
                r.set_body(name.to_string().into());
                (r, InstrumentationScope::builder("test").build())
            })
            .collect()
    }

    /// `n` owned records with bodies "0", "1", ….
    fn records(n: usize) -> Vec<Owned> {
        let names: Vec<String> = (0..n).map(|i| i.to_string()).collect();
        records_named(&names.iter().map(String::as_str).collect::<Vec<_>>())
    }

    fn refs(owned: &[Owned]) -> Vec<(&SdkLogRecord, &InstrumentationScope)> {
        owned.iter().map(|(r, s)| (r, s)).collect()
    }

    fn body(name: &str) -> String {
        format!(
            "{:?}",
            opentelemetry::logs::AnyValue::from(name.to_string())
        )
    }

    fn bodies(range: std::ops::Range<usize>) -> Vec<String> {
        range.map(|i| body(&i.to_string())).collect()
    }

    #[tokio::test]
    async fn refused_records_go_out_right_after_the_next_export() {
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
        // The new record on its own, then the kept ones, oldest first.
        let mut want = bodies(2..3);
        want.extend(bodies(0..2));
        assert_eq!(*flaky.got.lock().unwrap(), want);
        assert_eq!(t.otlp_verdicts_pending(), 0);
        assert_eq!(t.otlp_verdicts_lost(), 0);
    }

    #[tokio::test]
    async fn a_batch_the_collector_keeps_refusing_does_not_hold_back_new_ones() {
        let flaky = Flaky {
            poison: Some("poison".into()),
            ..Flaky::default()
        };
        let t = Arc::new(Telemetry::default());
        let exporter = Redelivery::new(flaky.clone(), t.clone());
        let poison = records_named(&["poison"]);
        assert!(exporter
            .export(LogBatch::new(&refs(&poison)))
            .await
            .is_err());
        let fresh = records_named(&["fresh"]);
        exporter
            .export(LogBatch::new(&refs(&fresh)))
            .await
            .expect("a new record goes out alone");
        assert_eq!(*flaky.got.lock().unwrap(), vec![body("fresh")]);
        assert_eq!(
            t.otlp_verdicts_pending(),
            1,
            "the refused one is still kept"
        );
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
        let left = exporter.undelivered();
        assert_eq!(left.flush().await, 0);
        assert_eq!(left.give_up(), 0);
        // In batches of at most CHUNK, oldest first.
        assert_eq!(*flaky.got.lock().unwrap(), bodies(5..MAX_PENDING + 5));
    }

    #[tokio::test]
    async fn a_redelivery_cut_short_keeps_its_records() {
        let t = Arc::new(Telemetry::default());
        let exporter = Redelivery::new(BlackHole, t.clone());
        let left = exporter.undelivered();
        left.core.keep(records(2).into_iter());
        assert!(
            tokio::time::timeout(Duration::from_millis(50), left.flush())
                .await
                .is_err(),
            "the black hole never answers"
        );
        assert_eq!(left.core.pending_len(), 2);
        assert_eq!(t.otlp_verdicts_pending(), 2);
        // Dropped without giving up (a shutdown cut short): counted all the same.
        drop(left);
        assert_eq!(t.otlp_verdicts_lost(), 2);
        assert_eq!(t.otlp_verdicts_pending(), 0);
    }

    #[tokio::test]
    async fn records_still_pending_at_shutdown_are_counted_lost() {
        let flaky = Flaky::default();
        flaky.fail.store(usize::MAX, Ordering::SeqCst);
        let t = Arc::new(Telemetry::default());
        let exporter = Redelivery::new(flaky, t.clone());
        let all = records(3);
        assert!(exporter.export(LogBatch::new(&refs(&all))).await.is_err());
        let left = exporter.undelivered();
        assert_eq!(left.flush().await, 3);
        assert_eq!(left.give_up(), 3);
        assert_eq!(t.otlp_verdicts_pending(), 0);
        assert_eq!(t.otlp_verdicts_lost(), 3);
    }
}
