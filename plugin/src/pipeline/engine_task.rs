//! The engine's own thread: the engine host is synchronous (and a WASM call can take a
//! while), so it runs on a dedicated OS thread that waits on the async queue through the
//! runtime handle, routes each batch to its target, and fans reports out to the sinks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use faultline_engine::{Params, Report};
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot};

use super::queue::BatchReceiver;
use super::report_sink::ReportSink;
use super::router::Router;
use super::telemetry::Telemetry;
use crate::engine_host::{EngineHost, HostError};
use crate::model::EventBatch;

/// Engine counters are fetched at most this often (a WASM call each), plus at idle and exit.
const COUNTERS_EVERY: Duration = Duration::from_secs(1);

/// Requests to the engine thread from outside the data path (HTTP handlers).
#[derive(Debug)]
pub enum EngineCommand {
    /// On-demand diagnosis: an external alarm says `target` became slow at `at_ns`.
    Trigger {
        target: String,
        at_ns: u64,
        reply: oneshot::Sender<Result<Option<Report>, String>>,
    },
}

/// What the engine thread did, for the shutdown log line and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineTaskSummary {
    pub batches: u64,
    pub events: u64,
    pub reports: u64,
    pub engine_errors: u64,
}

/// Everything the engine thread owns.
pub struct EngineTask {
    engine: Box<dyn EngineHost>,
    router: Router,
    sinks: Vec<Box<dyn ReportSink>>,
    telemetry: Arc<Telemetry>,
    idle: Duration,
    /// Cleared when the thread ends, so `/healthz` can say the pipeline is down.
    alive: Arc<AtomicBool>,
    summary: EngineTaskSummary,
    counters_fetched: Option<Instant>,
}

enum Wake {
    Batch(Option<EventBatch>),
    Command(Option<EngineCommand>),
    Idle,
}

impl EngineTask {
    /// An engine task; `target_params` are applied before the first batch.
    pub fn new(
        mut engine: Box<dyn EngineHost>,
        router: Router,
        target_params: Vec<(String, Params)>,
        sinks: Vec<Box<dyn ReportSink>>,
        telemetry: Arc<Telemetry>,
        idle: Duration,
    ) -> Result<Self, HostError> {
        for (name, p) in target_params {
            engine.set_target_params(&name, p)?;
        }
        Ok(Self {
            engine,
            router,
            sinks,
            telemetry,
            idle,
            alive: Arc::new(AtomicBool::new(true)),
            summary: EngineTaskSummary::default(),
            counters_fetched: None,
        })
    }

    /// A flag that is true while the engine thread runs.
    pub fn alive_flag(&self) -> Arc<AtomicBool> {
        self.alive.clone()
    }

    /// Runs until every batch sender is dropped and the queue is drained, then finishes
    /// the engine and flushes the sinks. Call from a dedicated (non-runtime) thread.
    pub fn run(
        mut self,
        handle: Handle,
        mut batches: BatchReceiver,
        mut commands: mpsc::Receiver<EngineCommand>,
    ) -> EngineTaskSummary {
        // Cleared however the thread ends (even by a panic in the engine).
        let _alive = AliveGuard(self.alive.clone());
        let mut commands_open = true;
        loop {
            let idle = self.idle;
            let wake = handle.block_on(async {
                tokio::select! {
                    // Data first: a trigger should see every event queued before it.
                    biased;
                    b = batches.recv() => Wake::Batch(b),
                    c = commands.recv(), if commands_open => Wake::Command(c),
                    _ = tokio::time::sleep(idle) => Wake::Idle,
                }
            });
            match wake {
                Wake::Batch(Some(b)) => self.ingest(b),
                Wake::Batch(None) => break,
                Wake::Command(Some(c)) => self.command(c),
                Wake::Command(None) => commands_open = false,
                Wake::Idle => self.on_idle(),
            }
        }
        self.shutdown();
        self.summary
    }

    fn ingest(&mut self, batch: EventBatch) {
        let stats = self.telemetry.source(batch.source);
        let target = match self.router.route(&batch.process) {
            Ok(t) => t,
            Err(reason) => {
                stats.add_dropped(reason, batch.events.len() as u64);
                return;
            }
        };
        self.summary.batches += 1;
        self.summary.events += batch.events.len() as u64;
        let started = Instant::now();
        let result = self
            .engine
            .ingest(&target, &batch.events)
            .and_then(|()| self.engine.take_reports());
        self.observe(started);
        match result {
            Ok(reports) => self.publish(&reports),
            Err(e) => self.engine_error(&e),
        }
    }

    fn command(&mut self, c: EngineCommand) {
        match c {
            EngineCommand::Trigger {
                target,
                at_ns,
                reply,
            } => {
                let started = Instant::now();
                let result = self.engine.trigger(&target, at_ns);
                self.observe(started);
                let answer = match result {
                    Ok(r) => {
                        if let Some(r) = &r {
                            self.publish(std::slice::from_ref(r));
                        }
                        Ok(r)
                    }
                    Err(e) => {
                        self.engine_error(&e);
                        Err(e.to_string())
                    }
                };
                // The HTTP client may have gone away; the report is published anyway.
                let _ = reply.send(answer);
            }
        }
    }

    /// No events for a while: the engine evaluates in event time only, so all we can do
    /// is collect reports that became due and make the sinks' output visible.
    fn on_idle(&mut self) {
        self.collect(|engine| engine.take_reports());
    }

    /// Runs one report-producing engine call, timed, and hands its reports to the sinks.
    fn collect(
        &mut self,
        call: impl FnOnce(&mut dyn EngineHost) -> Result<Vec<Report>, HostError>,
    ) {
        let started = Instant::now();
        let result = call(self.engine.as_mut());
        self.observe(started);
        match result {
            Ok(reports) => self.publish(&reports),
            Err(e) => self.engine_error(&e),
        }
        self.refresh_counters();
        self.flush();
    }

    fn shutdown(&mut self) {
        self.collect(|engine| engine.finish());
        tracing::info!(
            batches = self.summary.batches,
            events = self.summary.events,
            reports = self.summary.reports,
            "engine finished"
        );
    }

    fn observe(&mut self, started: Instant) {
        let secs = started.elapsed().as_secs_f64();
        for s in &mut self.sinks {
            s.observe_engine_call(secs);
        }
        if self
            .counters_fetched
            .is_none_or(|t| t.elapsed() >= COUNTERS_EVERY)
        {
            self.refresh_counters();
        }
    }

    fn refresh_counters(&mut self) {
        self.counters_fetched = Some(Instant::now());
        match self.engine.counters() {
            Ok(c) => {
                for s in &mut self.sinks {
                    s.observe_engine_counters(&c);
                }
            }
            Err(e) => self.engine_error(&e),
        }
    }

    fn publish(&mut self, reports: &[Report]) {
        if !reports.is_empty() {
            // Keep the engine counters in step with what the reports show.
            self.refresh_counters();
        }
        for r in reports {
            self.summary.reports += 1;
            tracing::info!(
                target_name = %r.target,
                verdict = r.verdict.as_str(),
                impact_factor = r.impact_factor,
                "report"
            );
            for s in &mut self.sinks {
                if let Err(e) = s.publish(r) {
                    tracing::warn!(error = %e, "sink failed to publish a report");
                }
            }
        }
    }

    fn flush(&mut self) {
        for s in &mut self.sinks {
            if let Err(e) = s.flush() {
                tracing::warn!(error = %e, "sink failed to flush");
            }
        }
    }

    fn engine_error(&mut self, e: &HostError) {
        self.summary.engine_errors += 1;
        tracing::warn!(error = %e, "engine call failed");
    }
}

/// Marks the engine thread as gone when dropped.
struct AliveGuard(Arc<AtomicBool>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}
