//! The engine's own thread: the engine host is synchronous (and a WASM call can take a
//! while), so it runs on a dedicated OS thread that waits on the async queue through the
//! runtime handle, routes each batch to its target, and fans reports out to the sinks.
//! On-demand triggers ahead of their target's data wait for it ([`super::trigger_wait`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use faultline_engine::{Params, Report, Stillness};
use tokio::runtime::Handle;
use tokio::sync::mpsc;

use super::process_state;
use super::quarantine::{Quarantine, TrapOutcome};
use super::queue::BatchReceiver;
use super::reorder::Reorder;
use super::report_sink::{ReportSink, SinkError};
use super::router::{Evicted, Routed, Router};
use super::silence::{self, SilenceWatch};
use super::telemetry::{DropReason, SourceRun, Telemetry};
use super::trigger_wait::{TriggerReply, TriggerWait, Waiting};
use super::warn_limit::WarnLimit;
use crate::engine_host::{EngineHost, HostError};
use crate::model::EventBatch;

/// Engine counters are fetched at most this often (a WASM call each), plus at idle and exit.
const COUNTERS_EVERY: Duration = Duration::from_secs(1);
/// A failing engine fails on every batch: after the first, one warning per this interval.
pub const ENGINE_WARN_EVERY: Duration = Duration::from_secs(10);

/// Commands taken between two batches at most, so a flood of triggers cannot starve the
/// data path either (the rest are taken after the next batch).
const COMMANDS_PER_BATCH: usize = 16;

/// Requests to the engine thread from outside the data path (HTTP handlers).
#[derive(Debug)]
pub enum EngineCommand {
    /// On-demand diagnosis: an external alarm says `target` became slow at `at_ns`.
    /// Answered once the target's events reach `at_ns`, or after the trigger wait.
    Trigger {
        target: String,
        at_ns: u64,
        reply: TriggerReply,
    },
    /// Take no more batches: the queue is closed (a source's next send fails), what it
    /// holds is drained, then the engine finishes and the sinks get the final reports.
    /// The runner sends it once the sources had their time to stop: one that did not
    /// still holds a sender, and waiting for every sender to go would lose those reports.
    Stop,
}

/// What the engine thread did, for the shutdown log line and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineTaskSummary {
    pub batches: u64,
    pub events: u64,
    pub reports: u64,
    pub engine_errors: u64,
    /// The engine's `finish` failed (a guest trap or timeout in `fl_finish`): the final
    /// `end_of_stream` reports are lost, so the run must not end as a success.
    pub finish_failed: bool,
}

/// Everything the engine thread owns.
pub struct EngineTask {
    engine: Box<dyn EngineHost>,
    router: Router,
    /// Configured targets' own parameters, which the router's targets of their processes
    /// on other hosts take too (see [`Routed::params_of`]).
    target_params: HashMap<String, Params>,
    sinks: Vec<Box<dyn ReportSink>>,
    telemetry: Arc<Telemetry>,
    idle: Duration,
    /// Cleared when the thread ends, so `/healthz` and `faultline_engine_up` can say the
    /// pipeline is down (the telemetry's flag).
    alive: Arc<AtomicBool>,
    summary: EngineTaskSummary,
    counters_fetched: Option<Instant>,
    triggers: TriggerWait,
    engine_warnings: WarnLimit,
    /// Silent targets left waiting for a reading of their threads (see
    /// [`silence::PROBE_BUDGET`]): a warning per interval, not per check.
    deferred_warnings: WarnLimit,
    /// One per sink (same order): a sink that fails on every report (a full disk) would
    /// otherwise log once per report, and one sink's failures must not hide another's.
    sink_warnings: Vec<WarnLimit>,
    /// Moves silent targets' clocks on (live sources only; see [`super::silence`]).
    silence: Option<SilenceWatch>,
    silence_checked: Instant,
    /// The last batch, or idle collection: the next idle collection is `idle` after it.
    quiet_since: Instant,
    /// Puts OTLP batches of a target back in time order (off unless configured).
    reorder: Reorder,
    reorder_warnings: WarnLimit,
    reorder_checked: Instant,
    /// [`EngineCommand::Stop`] arrived: the queue is to be closed and drained.
    stopping: bool,
    /// Targets whose own calls kept trapping the guest, set aside for a while.
    quarantine: Quarantine,
    quarantine_checked: Instant,
    /// The wall clock the router judges discovered targets' idleness by, and quarantines
    /// run on (tests set it).
    clock: Box<dyn Fn() -> Instant + Send>,
}

enum Wake {
    Batch(Option<EventBatch>),
    Command(Option<EngineCommand>),
    Idle,
}

impl EngineTask {
    /// An engine task; `target_params` are applied before the first batch. On-demand
    /// triggers ahead of their target's data wait up to `trigger_wait` for it.
    pub fn new(
        mut engine: Box<dyn EngineHost>,
        router: Router,
        target_params: Vec<(String, Params)>,
        sinks: Vec<Box<dyn ReportSink>>,
        telemetry: Arc<Telemetry>,
        idle: Duration,
        trigger_wait: Duration,
    ) -> Result<Self, HostError> {
        for (name, p) in &target_params {
            engine.set_target_params(name, p.clone())?;
        }
        let target_params = target_params.into_iter().collect();
        for s in &sinks {
            telemetry.register_sink(s.name());
        }
        let sink_warnings = sinks
            .iter()
            .map(|_| WarnLimit::new(ENGINE_WARN_EVERY))
            .collect();
        // The telemetry's flag, so the sinks export it as `faultline_engine_up`.
        let alive = telemetry.engine_alive_flag();
        alive.store(true, Ordering::Relaxed);
        Ok(Self {
            engine,
            router,
            target_params,
            sinks,
            telemetry,
            idle,
            alive,
            summary: EngineTaskSummary::default(),
            counters_fetched: None,
            triggers: TriggerWait::new(trigger_wait),
            engine_warnings: WarnLimit::new(ENGINE_WARN_EVERY),
            deferred_warnings: WarnLimit::new(ENGINE_WARN_EVERY),
            sink_warnings,
            silence: None,
            silence_checked: Instant::now(),
            quiet_since: Instant::now(),
            reorder: Reorder::new(0.0),
            reorder_warnings: WarnLimit::new(Duration::from_secs(60)),
            reorder_checked: Instant::now(),
            stopping: false,
            quarantine: Quarantine::default(),
            quarantine_checked: Instant::now(),
            clock: Box::new(Instant::now),
        })
    }

    /// Holds a target's OTLP batches until every active process of it sent past them (at
    /// most `max_lag_seconds` of event time) and feeds them in time order (see
    /// [`super::reorder`]); 0 feeds them as they come.
    pub fn with_reorder(mut self, max_lag_seconds: f64) -> Self {
        self.reorder = Reorder::new(max_lag_seconds);
        self
    }

    /// Keeps reporting on targets that fall silent (see [`super::silence`]): only for
    /// live sources, whose records arrive seconds after they were made. A recorded
    /// trace's pauses are the reader's, not the target's.
    pub fn with_silence_watch(mut self, watch: SilenceWatch) -> Self {
        self.silence = Some(watch);
        self
    }

    /// Routes by `clock` instead of the wall clock, so tests can make targets idle and
    /// quarantines end.
    #[cfg(test)]
    fn with_clock(mut self, clock: impl Fn() -> Instant + Send + 'static) -> Self {
        self.clock = Box::new(clock);
        self
    }

    /// A flag that is true while the engine thread runs.
    pub fn alive_flag(&self) -> Arc<AtomicBool> {
        self.alive.clone()
    }

    /// Runs until every batch sender is dropped, or [`EngineCommand::Stop`] closes the
    /// queue, and the queue is drained; then finishes the engine and flushes the sinks.
    /// Call from a dedicated (non-runtime) thread.
    pub fn run(
        mut self,
        handle: Handle,
        mut batches: BatchReceiver,
        mut commands: mpsc::Receiver<EngineCommand>,
    ) -> EngineTaskSummary {
        // Cleared however the thread ends (even by a panic in the engine).
        let _alive = AliveGuard(self.alive.clone());
        let mut commands_open = true;
        let mut closed = false;
        loop {
            // Sleep no longer than the earliest parked trigger may wait.
            let mut idle = self.triggers.next_deadline().map_or(self.idle, |d| {
                self.idle.min(d.saturating_duration_since(Instant::now()))
            });
            if self.silence.is_some() || self.reorder.held() > 0 {
                // Woken for the silence check too, and to release what quiet processes
                // held back; the idle collection keeps its pace.
                idle = idle.min(silence::CHECK_EVERY);
            }
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
                Wake::Batch(Some(b)) => {
                    self.ingest(b);
                    // The biased select polls commands only when the queue is empty, which
                    // under load (pull sources keep it full) is never: `/trigger` would time
                    // out exactly when an alarm fires. Take the pending ones after each batch;
                    // a trigger ahead of the data still waits for it (`TriggerWait`).
                    if commands_open {
                        commands_open = self.pending_commands(&mut commands);
                    }
                }
                Wake::Batch(None) => {
                    // Every sender is gone or the queue was closed (stop): faultline stops,
                    // the thread's end is no failure.
                    self.telemetry.set_engine_drained();
                    self.flush_held();
                    break;
                }
                Wake::Command(Some(c)) => self.command(c, false),
                Wake::Command(None) => commands_open = false,
                Wake::Idle => {
                    // Processes that went quiet hold nothing back any more.
                    self.release_quiet();
                    self.publish_reorder();
                    self.expire_quarantines();
                    self.answer_due();
                    if self.quiet_since.elapsed() >= self.idle {
                        self.on_idle();
                    }
                }
            }
            if self.stopping && !closed {
                // Batches queued before the close are still received, then `None`.
                batches.close();
                closed = true;
            }
            self.advance_silent();
        }
        // No more data will come: parked triggers get what there is.
        for w in self.triggers.drain() {
            self.answer(w);
        }
        self.shutdown();
        self.summary
    }

    fn ingest(&mut self, batch: EventBatch) {
        self.quiet_since = Instant::now();
        let stats = self.telemetry.source(batch.source);
        // TCP segment readings alone make no target (the engine counts those of processes
        // without calls): they must not take a discovered target's slot either.
        let segments_only = batch
            .events
            .iter()
            .all(|e| e.kind == faultline_engine::EventKind::TcpSegments);
        let routed = if segments_only {
            self.router
                .route_without_discovery(&batch.process)
                .map(|target| Routed {
                    target,
                    evicted: None,
                    params_of: None,
                })
        } else {
            self.router.route(&batch.process, (self.clock)())
        };
        let target = match routed {
            Ok(Routed {
                target,
                evicted,
                params_of,
            }) => {
                if let Some(e) = evicted {
                    self.evict(e);
                }
                if let Some(base) = params_of {
                    self.take_params_of(&base, &target);
                }
                target
            }
            Err(reason) => {
                stats.add_dropped(reason, batch.events.len() as u64);
                return;
            }
        };
        self.expire_quarantines();
        if self.quarantined(&target, batch.source, batch.events.len()) {
            return;
        }
        if self.reorder.applies(batch.source) {
            let overflows = self.reorder.overflows;
            let key = super::reorder::process_key(&batch.process);
            let now = Instant::now();
            let due = self
                .reorder
                .push(&target, batch.source, key, batch.events, now);
            if self.reorder.overflows > overflows {
                self.warn_reorder_overflow();
            }
            for (t, (source, chunks)) in due {
                self.feed_held(&t, source, chunks);
            }
        } else {
            // Records of another source of the same target come after the ones held (TCP
            // segment readings move no clock: they need not).
            if !segments_only {
                self.flush_target(&target);
            }
            self.feed(&target, batch);
        }
        self.release_quiet();
        self.publish_reorder();
        // A trigger waits for the records fed: held ones are fed once every active process
        // of the target sent past them, so a trigger answered on time sees every record up
        // to its alarm in order.
        if !self.triggers.is_empty() {
            self.answer_due();
        }
    }

    /// Gives `target` (another host's processes of configured target `base`) `base`'s
    /// parameters before its first batch. The router caps such targets with the
    /// configured ones at `max_targets`, as the engine caps per-target parameters, so
    /// only a failing engine refuses; the target then runs on `[analysis]`'s, said loudly.
    fn take_params_of(&mut self, base: &str, target: &str) {
        let Some(p) = self.target_params.get(base).cloned() else {
            return;
        };
        if let Err(e) = self.engine.set_target_params(target, p) {
            tracing::error!(
                target_name = %target,
                configured = %base,
                error = %e,
                "another host's target cannot take its configured target's parameters: it runs on [analysis]'s"
            );
        }
    }

    /// Drops everything kept of a target the router evicted for a new one, before the new
    /// one is fed: its slot must be free in the engine and the sinks too, and an evicted
    /// target must not linger on `/metrics` or `GET /report` as if still watched.
    fn evict(&mut self, e: Evicted) {
        let Evicted { target, idle } = e;
        tracing::info!(
            target_name = %target,
            idle_seconds = idle.as_secs(),
            "idle target evicted: its slot goes to a new target"
        );
        self.telemetry.add_target_evicted();
        self.quarantine.forget(&target);
        // Records the reorder stage accepted for it are analysed, not lost.
        self.drop_kept(&target, true);
        // Another host's target of a configured one holds a parameter slot too, capped
        // at max_targets in the engine: the next host's must find it free.
        let started = Instant::now();
        let cleared = self.engine.clear_target_params(&target);
        self.observe(started);
        if let Err(err) = cleared {
            self.engine_error(&err);
        }
    }

    /// Drops everything the pipeline keeps of `target`, for an eviction or a quarantine:
    /// the records the reorder stage holds go through [`EngineTask::feed`] first
    /// (analysed, or counted as quarantined), then its reorder entry, its engine state
    /// (`in_engine`; a quarantine follows a guest restart, which lost it already), its
    /// silence watch entry, its parked triggers (answered: no data will come for them)
    /// and every sink's series.
    fn drop_kept(&mut self, target: &Arc<str>, in_engine: bool) {
        self.flush_target(target);
        self.reorder.forget(target);
        if in_engine {
            let started = Instant::now();
            let forgotten = self.engine.forget(target);
            self.observe(started);
            if let Err(err) = forgotten {
                self.engine_error(&err);
            }
        }
        if let Some(w) = &mut self.silence {
            w.forget(target);
        }
        for w in self.triggers.forget(target) {
            self.answer(w);
        }
        for s in &mut self.sinks {
            s.forget(target);
        }
    }

    /// Feeds, at most once a second, what processes that went quiet no longer hold back
    /// (targets that get no batch would otherwise wait for the idle collection, which a
    /// busy queue never reaches).
    fn release_quiet(&mut self) {
        if self.reorder.held() == 0 || self.reorder_checked.elapsed() < Duration::from_secs(1) {
            return;
        }
        self.reorder_checked = Instant::now();
        for (target, (source, due)) in self.reorder.release_quiet(Instant::now()) {
            self.feed_held(&target, source, due);
        }
    }

    /// Shows the reorder stage's state in the telemetry (three atomic stores).
    fn publish_reorder(&mut self) {
        self.telemetry.set_reorder(
            self.reorder.held() as u64,
            self.reorder.late(),
            self.reorder.overflows,
        );
    }

    /// Feeds what the reorder stage still holds for every target.
    fn flush_held(&mut self) {
        for (target, (source, due)) in self.reorder.flush_all() {
            self.feed_held(&target, source, due);
        }
    }

    /// Feeds what the reorder stage holds for `target`.
    fn flush_target(&mut self, target: &Arc<str>) {
        let (source, due) = self.reorder.flush(target);
        self.feed_held(target, source, due);
    }

    /// Feeds released records. Their batches' process info is not kept: it only matters
    /// to the silence watch, which OTLP sources do not use.
    fn feed_held(
        &mut self,
        target: &Arc<str>,
        source: &'static str,
        due: Vec<Vec<faultline_engine::SyscallEvent>>,
    ) {
        for events in due {
            let process = crate::model::ProcessInfo::default();
            self.feed(
                target,
                EventBatch {
                    source,
                    process,
                    events,
                },
            );
        }
    }

    fn warn_reorder_overflow(&mut self) {
        if let Some(suppressed) = self.reorder_warnings.occurred(Instant::now()) {
            tracing::warn!(
                cap = super::reorder::MAX_HELD_EVENTS,
                overflows = self.reorder.overflows,
                suppressed,
                "the OTLP reorder stage is full: the oldest records of the target holding \
                 most were fed before every process sent past them (their order across \
                 processes may be off); lower [pipeline] reorder_seconds or send less"
            );
        }
    }

    /// Hands one batch of a routed target to the engine and publishes what it reports.
    fn feed(&mut self, target: &Arc<str>, batch: EventBatch) {
        // Records the reorder stage held from before a quarantine began.
        if self.quarantined(target, batch.source, batch.events.len()) {
            return;
        }
        let stats = self.telemetry.source(batch.source);
        self.summary.batches += 1;
        self.summary.events += batch.events.len() as u64;
        let started = Instant::now();
        let ingested = self.engine.ingest(target, &batch.events);
        let result = match &ingested {
            Ok(()) => {
                if let Some(w) = &mut self.silence {
                    let pid = batch.process.pid;
                    w.observe(target, batch.source, pid, &batch.events, Instant::now());
                }
                Some(self.engine.take_reports())
            }
            Err(e) => {
                // The batch is lost (a trapped guest restarts without it): count it.
                stats.add_dropped(DropReason::from(e), batch.events.len() as u64);
                self.engine_error(e);
                None
            }
        };
        self.observe(started);
        match result {
            Some(Ok(reports)) => self.publish(&reports),
            Some(Err(e)) => self.engine_error(&e),
            None => {}
        }
        self.triggers.observe(target, &batch.events);
        if let Err(e) = &ingested {
            self.after_failure(target, e);
        }
    }

    /// Whether `target` is quarantined; if so its `events` (of `source`) are counted as
    /// dropped.
    fn quarantined(&mut self, target: &str, source: &'static str, events: usize) -> bool {
        // Almost always nothing is quarantined: no clock read per batch then.
        if self.quarantine.tracked() == 0 || self.quarantine.until(target, (self.clock)()).is_none()
        {
            return false;
        }
        self.telemetry
            .source(source)
            .add_dropped(DropReason::Quarantined, events as u64);
        true
    }

    /// Counts a trap of a call made for `target`; the trap that quarantines it drops
    /// everything kept of it, as an eviction does: its reports would describe a state
    /// that no longer exists, and its parked triggers get no data.
    fn after_failure(&mut self, target: &Arc<str>, e: &HostError) {
        if !matches!(e, HostError::Trap { .. }) {
            return;
        }
        let now = (self.clock)();
        let length = match self.quarantine.record_trap(target, now) {
            TrapOutcome::Counted { .. } => return,
            TrapOutcome::Quarantined { length } => length,
        };
        tracing::warn!(
            target_name = %target,
            traps = super::quarantine::TRAPS_TO_QUARANTINE,
            within_seconds = super::quarantine::TRAP_WINDOW.as_secs(),
            quarantine_seconds = length.as_secs(),
            error = %e,
            "target quarantined: its own calls trapped the engine guest again and again, and \
             every trap cost every target its analysis state; its batches are dropped \
             (faultline_events_dropped_total{{reason=\"quarantined\"}}) until the quarantine ends"
        );
        self.telemetry
            .set_quarantined(self.quarantine.active(now), 1);
        self.drop_kept(target, false);
    }

    /// Ends the quarantines that are over, at most once a second.
    fn expire_quarantines(&mut self) {
        if self.quarantine.tracked() == 0 {
            return;
        }
        let now = (self.clock)();
        if now.saturating_duration_since(self.quarantine_checked) < Duration::from_secs(1) {
            return;
        }
        self.quarantine_checked = now;
        let over = self.quarantine.expire(now);
        if over.is_empty() {
            return;
        }
        for t in &over {
            tracing::info!(
                target_name = %t,
                "quarantine over: the target is analysed again, from a clean state"
            );
        }
        self.telemetry
            .set_quarantined(self.quarantine.active(now), 0);
    }

    /// Handles up to [`COMMANDS_PER_BATCH`] commands already queued, without waiting;
    /// false once the command channel is closed.
    fn pending_commands(&mut self, commands: &mut mpsc::Receiver<EngineCommand>) -> bool {
        for _ in 0..COMMANDS_PER_BATCH {
            match commands.try_recv() {
                Ok(c) => self.command(c, true),
                Err(mpsc::error::TryRecvError::Empty) => return true,
                Err(mpsc::error::TryRecvError::Disconnected) => return false,
            }
        }
        true
    }

    /// `queued`: taken between batches, with more data possibly queued behind it.
    fn command(&mut self, c: EngineCommand, queued: bool) {
        match c {
            EngineCommand::Trigger {
                target,
                at_ns,
                reply,
            } => {
                let now = Instant::now();
                if let Some(w) = self.triggers.park(target, at_ns, reply, now, queued) {
                    self.answer(w);
                }
            }
            EngineCommand::Stop => self.stopping = true,
        }
    }

    /// Answers the parked triggers whose data arrived or whose wait is over.
    fn answer_due(&mut self) {
        for w in self.triggers.take_due(Instant::now()) {
            self.answer(w);
        }
    }

    fn answer(&mut self, w: Waiting) {
        // A trigger whose wait ran out still gets every record up to its alarm that
        // reached faultline (held ones later than those may then come out of order).
        if self.reorder.held() > 0 {
            let (source, due) = self.reorder.flush_until(&w.target, w.at_ns);
            let target: Arc<str> = Arc::from(w.target.as_str());
            self.feed_held(&target, source, due);
        }
        let now = (self.clock)();
        if let Some(until) = self.quarantine.until(&w.target, now) {
            let left = until.saturating_duration_since(now).as_secs();
            let why = format!(
                "target `{}` is quarantined for another {left} s: its own engine calls trapped \
                 the guest repeatedly (see faultline's log), so it is not analysed meanwhile",
                w.target
            );
            let _ = w.reply.send(Err(why));
            return;
        }
        let started = Instant::now();
        let result = self.engine.trigger(&w.target, w.at_ns);
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
                let target: Arc<str> = Arc::from(w.target.as_str());
                self.after_failure(&target, &e);
                Err(e.to_string())
            }
        };
        // The HTTP client may have gone away; the report is published anyway.
        let _ = w.reply.send(answer);
    }

    /// Moves the clocks of targets silent for long enough, at most once per
    /// [`silence::CHECK_EVERY`], and publishes the cadence reports that became due.
    fn advance_silent(&mut self) {
        let Some(watch) = &mut self.silence else {
            return;
        };
        let now = Instant::now();
        if now.saturating_duration_since(self.silence_checked) < silence::CHECK_EVERY {
            return;
        }
        self.silence_checked = now;
        let live = self.telemetry.live_sources();
        let running = |source: &'static str| {
            live.iter()
                .any(|l| l.name == source && l.run() == SourceRun::Running)
        };
        // Timed from here: reading the processes' states is part of the analysis.
        let started = Instant::now();
        let check = watch.due(
            now,
            running,
            silence::process_exists,
            process_state::stillness,
        );
        let (due, deferred) = (check.due, check.deferred);
        if deferred > 0 {
            if let Some(suppressed) = self.deferred_warnings.occurred(now) {
                let budget = silence::PROBE_BUDGET;
                tracing::warn!(
                    deferred,
                    suppressed,
                    "silent targets wait for a first reading of their threads: the budget of {budget} threads read a second is spent; their clocks move once read"
                );
            }
        }
        if due.is_empty() {
            return;
        }
        // Which reading a silence is judged by, once per silence and change: the hint says
        // it only from the next report on.
        for d in due.iter().filter(|d| d.news) {
            let how = match d.still {
                Stillness::Asleep => "every thread sleeps in a wait: judged as waiting",
                Stillness::Unknown => {
                    "threads not all seen asleep (frozen, stopped, blocked, running or unreadable): judged as stopped"
                }
            };
            let target = &d.target;
            tracing::info!(target_name = %target, "silent target, its clock moves on: {how}");
        }
        let result = due
            .iter()
            .try_for_each(|d| self.engine.advance(&d.target, d.now_ns, d.still))
            .and_then(|()| self.engine.take_reports());
        self.observe(started);
        match result {
            // Most checks move a clock within a cadence epoch: nothing to publish.
            Ok(reports) if !reports.is_empty() => {
                self.publish(&reports);
                self.flush();
            }
            Ok(_) => {}
            Err(e) => self.engine_error(&e),
        }
        let at = (self.clock)();
        for d in &due {
            self.triggers.advance(&d.target, d.now_ns);
            // Its processes live on and its reports go on: not idle (see `Router::touch`).
            self.router.touch(&d.target, at);
        }
        self.answer_due();
    }

    /// No events for a while: collect reports that became due (a trigger's, a silent
    /// target's) and make the sinks' output visible.
    fn on_idle(&mut self) {
        self.quiet_since = Instant::now();
        // A failure is counted and warned about; the next collection tries again.
        let _ = self.collect(|engine| engine.take_reports());
    }

    /// Runs one report-producing engine call, timed, and hands its reports to the sinks;
    /// its error, once counted, for callers that lose more than a round of reports by it.
    fn collect(
        &mut self,
        call: impl FnOnce(&mut dyn EngineHost) -> Result<Vec<Report>, HostError>,
    ) -> Result<(), HostError> {
        let started = Instant::now();
        let result = call(self.engine.as_mut());
        self.observe(started);
        let outcome = match result {
            Ok(reports) => {
                self.publish(&reports);
                Ok(())
            }
            Err(e) => {
                self.engine_error(&e);
                Err(e)
            }
        };
        self.refresh_counters();
        self.flush();
        outcome
    }

    fn shutdown(&mut self) {
        if let Err(e) = self.collect(|engine| engine.finish()) {
            // Logged whatever the engine-error rate limit says: no report will follow.
            tracing::error!(
                error = %e,
                "the engine failed to finish: the final end_of_stream reports are lost"
            );
            self.summary.finish_failed = true;
        }
        self.publish_reorder();
        tracing::info!(
            batches = self.summary.batches,
            events = self.summary.events,
            reports = self.summary.reports,
            otlp_records_out_of_order = self.reorder.late(),
            reorder_overflows = self.reorder.overflows,
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
            for (s, warnings) in self.sinks.iter_mut().zip(&mut self.sink_warnings) {
                if let Err(e) = s.publish(r) {
                    sink_failed(&self.telemetry, s.name(), warnings, &e, "publish a report");
                }
            }
        }
    }

    fn flush(&mut self) {
        for (s, warnings) in self.sinks.iter_mut().zip(&mut self.sink_warnings) {
            if let Err(e) = s.flush() {
                sink_failed(&self.telemetry, s.name(), warnings, &e, "flush");
            }
        }
    }

    fn engine_error(&mut self, e: &HostError) {
        self.summary.engine_errors += 1;
        if let Some(suppressed) = self.engine_warnings.occurred(Instant::now()) {
            tracing::warn!(
                error = %e,
                suppressed,
                "engine call failed (batches it lost: faultline_events_dropped_total{{reason=\"engine_error\"}})"
            );
        }
    }
}

/// Counts a sink's failure and warns about it, rate-limited.
fn sink_failed(
    telemetry: &Telemetry,
    sink: &'static str,
    warnings: &mut WarnLimit,
    e: &SinkError,
    what: &str,
) {
    telemetry.add_sink_error(sink);
    if let Some(suppressed) = warnings.occurred(Instant::now()) {
        tracing::warn!(
            error = %e,
            suppressed,
            "sink failed to {what} (failures: faultline_sink_errors_total{{sink=\"{sink}\"}})"
        );
    }
}

/// Marks the engine thread as gone when dropped.
struct AliveGuard(Arc<AtomicBool>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine_host::NativeHost;
    use crate::model::ProcessInfo;
    use crate::pipeline::queue;
    use crate::pipeline::silence::SilenceWatch;
    use faultline_engine::syscalls::SyscallId;
    use faultline_engine::SyscallEvent;
    use tokio::sync::oneshot;

    const SECOND: u64 = 1_000_000_000;

    /// One thread's `read`s every 10 ms over `[from_s, to_s)`.
    fn batch(tid: u32, from_s: u64, to_s: u64) -> EventBatch {
        let read = SyscallId::from_name("read");
        let events = (from_s * 100..to_s * 100)
            .map(|i| SyscallEvent::complete(7, tid, read, i * SECOND / 100, 20_000))
            .collect();
        EventBatch {
            source: "perf",
            process: ProcessInfo {
                comm: Some("db".into()),
                ..ProcessInfo::default()
            },
            events,
        }
    }

    /// An engine that queues one more batch (the next second of data) for each batch it
    /// ingests, up to `limit`, so the queue is never empty before then; it records how
    /// many batches it had ingested when a trigger reached it.
    struct Refilling {
        queue: Option<mpsc::Sender<EventBatch>>,
        ingested: u64,
        limit: u64,
        triggered_after: Arc<std::sync::atomic::AtomicU64>,
    }

    impl EngineHost for Refilling {
        crate::pipeline::test_support::idle_engine_methods!();
        fn ingest(&mut self, _: &str, _: &[SyscallEvent]) -> Result<(), HostError> {
            let second = self.ingested;
            self.ingested += 1;
            if self.ingested >= self.limit {
                self.queue = None;
            } else if let Some(q) = &self.queue {
                q.try_send(batch(1, second + 1, second + 2))
                    .expect("room for the next batch");
            }
            Ok(())
        }
        fn trigger(&mut self, _: &str, _: u64) -> Result<Option<Report>, HostError> {
            self.triggered_after.store(self.ingested, Ordering::Relaxed);
            Ok(None)
        }
    }

    /// The report a trigger's `answer` brings within 10 s (well within the 20-s trigger
    /// wait of these tests), from an engine without error, for a known target.
    fn report_within_10s(
        rt: &tokio::runtime::Runtime,
        answer: oneshot::Receiver<Result<Option<Report>, String>>,
    ) -> Report {
        rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), answer).await })
            .expect("answered within 10 s")
            .expect("reply sent")
            .expect("no engine error")
            .expect("a report for a known target")
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime")
    }

    /// A wall clock for [`EngineTask::with_clock`] that reads the seconds stored in the
    /// returned cell past its creation, so a test can make targets idle or quarantines end.
    fn settable_clock() -> (
        Arc<std::sync::atomic::AtomicU64>,
        impl Fn() -> Instant + Send + 'static,
    ) {
        let base = Instant::now();
        let wall_s = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let cell = wall_s.clone();
        (wall_s, move || {
            base + Duration::from_secs(cell.load(Ordering::Relaxed))
        })
    }

    /// An engine task with no targets configured and `sinks`, triggers held up to `wait`.
    fn task_with(
        engine: Box<dyn EngineHost>,
        sinks: Vec<Box<dyn ReportSink>>,
        telemetry: Arc<Telemetry>,
        wait: Duration,
    ) -> EngineTask {
        EngineTask::new(
            engine,
            Router::new(&[], 4),
            Vec::new(),
            sinks,
            telemetry,
            Duration::from_secs(5),
            wait,
        )
        .expect("task")
    }

    #[test]
    fn a_trigger_is_answered_while_the_queue_stays_full() {
        let rt = runtime();
        let (tx, rx) = queue::bounded(8);
        let triggered_after = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let limit = 1_000;
        let engine = Refilling {
            queue: Some(tx.clone()),
            ingested: 0,
            limit,
            triggered_after: triggered_after.clone(),
        };
        let task = task_with(
            Box::new(engine),
            Vec::new(),
            Arc::new(Telemetry::default()),
            Duration::from_secs(600),
        );
        let (cmd_tx, cmd_rx) = mpsc::channel(4);
        rt.block_on(tx.send(batch(1, 0, 1))).expect("queue open");
        drop(tx);
        let (reply, answer) = oneshot::channel();
        // Ahead of the first batch: the trigger waits until the batch of second 5.
        rt.block_on(cmd_tx.send(EngineCommand::Trigger {
            target: "db".into(),
            at_ns: 5 * SECOND,
            reply,
        }))
        .expect("command queue open");
        drop(cmd_tx);

        let summary = task.run(rt.handle().clone(), rx, cmd_rx);
        assert_eq!(summary.batches, limit, "the queue was kept full to the end");
        assert_eq!(
            triggered_after.load(Ordering::Relaxed),
            6,
            "answered once the data reached the alarm, not when the queue drained"
        );
        let answer = rt.block_on(answer).expect("reply sent");
        assert!(matches!(answer, Ok(None)), "{answer:?}");
    }

    /// A sink that fails every report.
    struct Refusing;

    impl ReportSink for Refusing {
        fn name(&self) -> &'static str {
            "refusing"
        }
        fn publish(&mut self, _: &Report) -> Result<(), SinkError> {
            Err(SinkError {
                sink: "refusing",
                message: "disk full".into(),
            })
        }
    }

    /// A sink that takes every report.
    struct Taking;

    impl ReportSink for Taking {
        fn name(&self) -> &'static str {
            "taking"
        }
        fn publish(&mut self, _: &Report) -> Result<(), SinkError> {
            Ok(())
        }
    }

    #[test]
    fn each_failed_publish_is_counted_against_its_sink() {
        let rt = runtime();
        let telemetry = Arc::new(Telemetry::default());
        let engine = Box::new(NativeHost::new(Params::default(), true).expect("engine"));
        let task = task_with(
            engine,
            vec![Box::new(Refusing), Box::new(Taking)],
            telemetry.clone(),
            Duration::from_secs(20),
        );
        let (tx, rx) = queue::bounded(8);
        let (cmd_tx, cmd_rx) = mpsc::channel(1);
        rt.block_on(tx.send(batch(1, 0, 30))).expect("queue open");
        rt.block_on(tx.send(batch(2, 0, 30))).expect("queue open");
        drop(tx);
        drop(cmd_tx);
        let summary = task.run(rt.handle().clone(), rx, cmd_rx);
        assert!(summary.reports >= 1, "at least the final report");
        assert_eq!(
            telemetry.sink_errors(),
            vec![("refusing", summary.reports), ("taking", 0)]
        );
    }

    #[test]
    fn a_batch_the_engine_fails_on_is_counted_as_an_engine_error_drop() {
        let rt = runtime();
        let telemetry = Arc::new(Telemetry::default());
        let task = task_with(
            Box::new(crate::pipeline::test_support::FailingIngest),
            Vec::new(),
            telemetry.clone(),
            Duration::from_secs(20),
        );
        let (tx, rx) = queue::bounded(8);
        let (cmd_tx, cmd_rx) = mpsc::channel(1);
        rt.block_on(tx.send(batch(1, 0, 1))).expect("queue open");
        rt.block_on(tx.send(batch(2, 1, 3))).expect("queue open");
        drop(tx);
        drop(cmd_tx);
        let summary = task.run(rt.handle().clone(), rx, cmd_rx);
        assert_eq!(summary.engine_errors, 2);
        let perf = telemetry.source("perf");
        assert_eq!(perf.dropped(DropReason::EngineError), 300);
    }

    #[test]
    fn a_trigger_ahead_of_the_data_is_answered_once_the_data_reaches_the_alarm() {
        let rt = runtime();
        let engine = Box::new(NativeHost::new(Params::default(), true).expect("engine"));
        let task = task_with(
            engine,
            Vec::new(),
            Arc::new(Telemetry::default()),
            Duration::from_secs(20),
        );
        let (tx, rx) = queue::bounded(8);
        let (cmd_tx, cmd_rx) = mpsc::channel(4);
        let handle = rt.handle().clone();
        let thread = std::thread::spawn(move || task.run(handle, rx, cmd_rx));

        let early = batch(1, 0, 20);
        let early_events = early.events.len() as u64;
        rt.block_on(tx.send(early)).expect("queue open");
        let (reply, mut answer) = oneshot::channel();
        let at_ns = 25 * SECOND;
        rt.block_on(cmd_tx.send(EngineCommand::Trigger {
            target: "db".into(),
            at_ns,
            reply,
        }))
        .expect("command queue open");
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            answer.try_recv().is_err(),
            "answered before the data reached the alarm"
        );

        rt.block_on(tx.send(batch(2, 18, 30))).expect("queue open");
        let report = report_within_10s(&rt, answer);
        // Evaluated at once, the window would end at the alarm (the data stopped short).
        assert!(report.window_end_ns > at_ns, "{}", report.window_end_ns);
        assert!(
            report.events_analyzed > early_events,
            "the report covers the late batch: {} events analysed, {early_events} before it",
            report.events_analyzed
        );
        assert_eq!(report.threads.total, 2, "both threads are in the window");

        drop(tx);
        drop(cmd_tx);
        let summary = thread.join().expect("engine thread");
        assert_eq!(summary.batches, 2);
        assert!(summary.reports >= 2, "the on-demand and the final report");
    }

    /// A sink that keeps every report.
    struct Keeping(Arc<std::sync::Mutex<Vec<Report>>>);

    impl ReportSink for Keeping {
        fn name(&self) -> &'static str {
            "keeping"
        }
        fn publish(&mut self, r: &Report) -> Result<(), SinkError> {
            self.0.lock().expect("reports").push(r.clone());
            Ok(())
        }
    }

    /// Feeds 30 s of one thread of this very process (so it exists) from `source`, then
    /// stays silent for 3 s of wall time with a 1-s cadence and a 0.3-s silence watch;
    /// returns the cadence reports of the silence.
    fn silent_reports(source: &'static str, live: bool) -> Vec<Report> {
        silent_reports_of(source, live, std::process::id())
    }

    /// [`silent_reports`] of a target whose records name process `pid`.
    fn silent_reports_of(source: &'static str, live: bool, pid: u32) -> Vec<Report> {
        let rt = runtime();
        let telemetry = Arc::new(Telemetry::default());
        if live {
            telemetry.start_live("perf");
        }
        let params = Params {
            cadence_seconds: 1.0,
            ..Params::default()
        };
        let engine = Box::new(NativeHost::new(params, true).expect("engine"));
        let kept = Arc::new(std::sync::Mutex::new(Vec::new()));
        let task = task_with(
            engine,
            vec![Box::new(Keeping(kept.clone()))],
            telemetry,
            Duration::from_secs(20),
        )
        .with_silence_watch(SilenceWatch::new(
            Duration::from_millis(300),
            vec!["perf"],
            4,
        ));
        let (tx, rx) = queue::bounded(8);
        let (cmd_tx, cmd_rx) = mpsc::channel(1);
        let handle = rt.handle().clone();
        let thread = std::thread::spawn(move || task.run(handle, rx, cmd_rx));
        let mut b = batch(1, 0, 30);
        b.source = source;
        b.process.pid = Some(pid);
        rt.block_on(tx.send(b)).expect("queue open");
        std::thread::sleep(Duration::from_millis(3_000));
        drop(tx);
        drop(cmd_tx);
        thread.join().expect("engine thread");
        let all = kept.lock().expect("reports").clone();
        // Past the batch's own data (its last record is at 29.99 s, so a tick from 30 s
        // on comes from a moved clock), and without the final report (the end of
        // stream also evaluates at the clock).
        all.into_iter()
            .filter(|r| r.window_end_ns >= 30 * SECOND)
            .filter(|r| r.trigger == faultline_engine::report::Trigger::Cadence)
            .collect()
    }

    #[test]
    fn a_silent_target_of_a_live_capture_is_still_reported_on() {
        let after = silent_reports("perf", true);
        assert!(
            after.len() >= 2,
            "{} cadence reports while silent",
            after.len()
        );
        let last = after.last().expect("reports");
        assert!(last.window_end_ns > 30 * SECOND, "{}", last.window_end_ns);
        assert!(last.silent_seconds >= 1.0, "{}", last.silent_seconds);
    }

    #[test]
    fn a_silent_target_whose_process_sleeps_is_reported_as_waiting() {
        // The host reads the process's threads (a real sleeping child) before it moves
        // the clock, and the engine hears it: the silent hint says they sleep.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep runs");
        let after = silent_reports_of("perf", true, child.id());
        child.kill().ok();
        child.wait().ok();
        let last = after.last().expect("reports while silent");
        assert!(last.hint.contains("sleeps"), "{}", last.hint);
        // This test's own process has running threads: not asleep.
        let own = silent_reports("perf", true);
        let last = own.last().expect("reports while silent");
        assert!(!last.hint.contains("sleeps"), "{}", last.hint);
    }

    #[test]
    fn a_silent_target_of_no_running_capture_is_left_alone() {
        assert!(silent_reports("otlp_grpc", true).is_empty());
        assert!(silent_reports("perf", false).is_empty());
    }

    #[test]
    fn a_trigger_on_a_silent_target_is_answered_once_its_clock_passes_the_alarm() {
        let rt = runtime();
        let telemetry = Arc::new(Telemetry::default());
        telemetry.start_live("perf");
        let engine = Box::new(NativeHost::new(Params::default(), true).expect("engine"));
        let task =
            task_with(engine, Vec::new(), telemetry, Duration::from_secs(20)).with_silence_watch(
                SilenceWatch::new(Duration::from_millis(300), vec!["perf"], 4),
            );
        let (tx, rx) = queue::bounded(8);
        let (cmd_tx, cmd_rx) = mpsc::channel(4);
        let handle = rt.handle().clone();
        let thread = std::thread::spawn(move || task.run(handle, rx, cmd_rx));
        let mut b = batch(1, 0, 30);
        b.process.pid = Some(std::process::id());
        rt.block_on(tx.send(b)).expect("queue open");
        // An alarm a second past the data: without a moved clock it waits the full 20 s.
        let (reply, answer) = oneshot::channel();
        let asked = Instant::now();
        rt.block_on(cmd_tx.send(EngineCommand::Trigger {
            target: "db".into(),
            at_ns: 31 * SECOND,
            reply,
        }))
        .expect("command queue open");
        let report = report_within_10s(&rt, answer);
        assert!(asked.elapsed() < Duration::from_secs(10));
        assert!(
            report.window_end_ns >= 31 * SECOND,
            "{}",
            report.window_end_ns
        );
        drop(tx);
        drop(cmd_tx);
        thread.join().expect("engine thread");
    }

    /// A native engine whose `finish` traps, as a guest over its budget in `fl_finish`,
    /// or whose calls for one target trap, as a guest on a poison batch.
    struct Trapping {
        native: NativeHost,
        on_finish: bool,
        /// The target whose batches trap (settable while the task runs).
        ingest_of: Arc<std::sync::Mutex<Option<&'static str>>>,
        ingests: Arc<std::sync::atomic::AtomicU64>,
    }

    impl Trapping {
        fn finish(native: NativeHost) -> Self {
            Self {
                native,
                on_finish: true,
                ingest_of: Arc::default(),
                ingests: Arc::default(),
            }
        }
    }

    fn trap(call: &'static str) -> HostError {
        HostError::Trap {
            call,
            message: "out of fuel (test double)".into(),
        }
    }

    impl EngineHost for Trapping {
        fn kind(&self) -> crate::engine_host::EngineKind {
            self.native.kind()
        }
        fn set_target_params(&mut self, target: &str, p: Params) -> Result<(), HostError> {
            self.native.set_target_params(target, p)
        }
        fn clear_target_params(&mut self, target: &str) -> Result<(), HostError> {
            self.native.clear_target_params(target)
        }
        fn ingest(&mut self, target: &str, events: &[SyscallEvent]) -> Result<(), HostError> {
            self.ingests.fetch_add(1, Ordering::Relaxed);
            if *self.ingest_of.lock().expect("trapping target") == Some(target) {
                return Err(trap("fl_ingest"));
            }
            self.native.ingest(target, events)
        }
        fn trigger(&mut self, target: &str, at_ns: u64) -> Result<Option<Report>, HostError> {
            self.native.trigger(target, at_ns)
        }
        fn advance(
            &mut self,
            target: &str,
            now_ns: u64,
            still: Stillness,
        ) -> Result<(), HostError> {
            self.native.advance(target, now_ns, still)
        }
        fn forget(&mut self, target: &str) -> Result<(), HostError> {
            self.native.forget(target)
        }
        fn take_reports(&mut self) -> Result<Vec<Report>, HostError> {
            self.native.take_reports()
        }
        fn finish(&mut self) -> Result<Vec<Report>, HostError> {
            if self.on_finish {
                return Err(trap("fl_finish"));
            }
            self.native.finish()
        }
        fn calibrate(
            &mut self,
            target: &str,
            fault_start_ns: Option<u64>,
        ) -> Result<Option<faultline_engine::report::Calibration>, HostError> {
            self.native.calibrate(target, fault_start_ns)
        }
        fn counters(&mut self) -> Result<faultline_engine::report::EngineCounters, HostError> {
            self.native.counters()
        }
        fn state_bytes(&mut self) -> Result<usize, HostError> {
            self.native.state_bytes()
        }
    }

    #[test]
    fn a_failed_finish_is_in_the_summary() {
        let rt = runtime();
        let run = |engine: Box<dyn EngineHost>| {
            let kept = Arc::new(std::sync::Mutex::new(Vec::new()));
            let task = task_with(
                engine,
                vec![Box::new(Keeping(kept.clone()))],
                Arc::new(Telemetry::default()),
                Duration::from_secs(20),
            );
            let (tx, rx) = queue::bounded(8);
            let (_cmd_tx, cmd_rx) = mpsc::channel(1);
            rt.block_on(tx.send(batch(1, 0, 30))).expect("queue open");
            drop(tx);
            let summary = task.run(rt.handle().clone(), rx, cmd_rx);
            let finals = kept
                .lock()
                .expect("reports")
                .iter()
                .filter(|r| r.trigger == faultline_engine::report::Trigger::EndOfStream)
                .count();
            (summary, finals)
        };
        let native = || NativeHost::new(Params::default(), true).expect("engine");
        let (summary, finals) = run(Box::new(Trapping::finish(native())));
        assert!(summary.finish_failed, "{summary:?}");
        assert_eq!(finals, 0);
        assert!(summary.engine_errors >= 1);
        let (summary, finals) = run(Box::new(native()));
        assert!(!summary.finish_failed, "{summary:?}");
        assert_eq!(finals, 1, "the same data finished without the trap");
    }

    #[test]
    fn a_stop_finishes_the_engine_though_a_sender_is_still_held() {
        let rt = runtime();
        let telemetry = Arc::new(Telemetry::default());
        let kept = Arc::new(std::sync::Mutex::new(Vec::new()));
        let engine = Box::new(NativeHost::new(Params::default(), true).expect("engine"));
        let task = task_with(
            engine,
            vec![Box::new(Keeping(kept.clone()))],
            telemetry.clone(),
            Duration::from_secs(20),
        );
        let (tx, rx) = queue::bounded(8);
        let (cmd_tx, cmd_rx) = mpsc::channel(4);
        // Queued before the stop: still analysed.
        rt.block_on(tx.send(batch(1, 0, 30))).expect("queue open");
        rt.block_on(cmd_tx.send(EngineCommand::Stop))
            .expect("command queue open");
        // `tx` stays alive, as a source stuck in a read holds its sender.
        let handle = rt.handle().clone();
        let thread = std::thread::spawn(move || task.run(handle, rx, cmd_rx));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !thread.is_finished() {
            assert!(Instant::now() < deadline, "the engine did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
        let summary = thread.join().expect("engine thread");
        assert_eq!(summary.batches, 1, "the queued batch was drained");
        assert!(!summary.finish_failed);
        assert!(telemetry.engine_drained());
        let finals: Vec<Report> = kept
            .lock()
            .expect("reports")
            .iter()
            .filter(|r| r.trigger == faultline_engine::report::Trigger::EndOfStream)
            .cloned()
            .collect();
        assert_eq!(finals.len(), 1, "{finals:?}");
        assert_eq!(finals[0].target, "db");
        // The straggler's next batch is refused, not queued for nobody.
        assert!(rt.block_on(tx.send(batch(2, 30, 31))).is_err());
    }

    /// `batch`'s records, as one process of an OTLP-fed service sends them.
    fn otlp(pid: u32, from_s: u64, to_s: u64) -> EventBatch {
        let mut b = batch(pid, from_s, to_s);
        b.source = crate::sources::otlp::GRPC_SOURCE;
        b.process.pid = Some(pid);
        for e in &mut b.events {
            e.pid = pid;
            e.ts_ns += u64::from(pid);
        }
        b
    }

    #[test]
    fn otlp_batches_of_two_processes_reach_the_engine_in_time_order() {
        let rt = runtime();
        let engine = crate::pipeline::test_support::Recording::default();
        let (fed, at_trigger) = (engine.fed.clone(), engine.at_trigger.clone());
        let telemetry = Arc::new(Telemetry::default());
        let task = task_with(
            Box::new(engine),
            Vec::new(),
            telemetry.clone(),
            Duration::from_secs(1),
        )
        .with_reorder(30.0);
        let (tx, rx) = queue::bounded(32);
        let (cmd_tx, cmd_rx) = mpsc::channel(4);
        // Each process exports a second at a time, process 1's queue a second ahead of
        // process 2's (each SDK on its own schedule).
        // Each announces itself with its first record before the rest of its first
        // second: a process's first batch cannot be waited for before it exists.
        let head = |mut b: EventBatch| {
            let tail = b.events.split_off(1);
            let rest = EventBatch {
                events: tail,
                ..b.clone()
            };
            (b, rest)
        };
        let (a, a_rest) = head(otlp(1, 0, 1));
        let (b, b_rest) = head(otlp(2, 0, 1));
        let mut batches = vec![a, b, a_rest, otlp(1, 1, 2), b_rest];
        for k in 2..12 {
            batches.push(otlp(1, k, k + 1));
            batches.push(otlp(2, k - 1, k));
        }
        batches.push(otlp(2, 11, 12));
        for b in batches {
            rt.block_on(tx.send(b)).expect("queue open");
        }
        let (reply, answer) = oneshot::channel();
        // The data reached the alarm: answered at once, with every record it holds fed.
        rt.block_on(cmd_tx.send(EngineCommand::Trigger {
            target: "db".into(),
            at_ns: 6 * SECOND,
            reply,
        }))
        .expect("command queue open");
        drop(tx);
        drop(cmd_tx);
        let summary = task.run(rt.handle().clone(), rx, cmd_rx);
        let fed = fed.lock().expect("lock").clone();
        assert_eq!(fed.len(), 2 * 1_200, "every record fed once");
        assert_eq!(summary.events, 2 * 1_200);
        assert!(
            fed.windows(2).all(|w| w[0] <= w[1]),
            "fed in time order across the processes"
        );
        // Answered once the records fed reached the alarm (the newest received 3 s past
        // it): everything up to the alarm, nothing held back.
        let seen = at_trigger.load(Ordering::Relaxed) as usize;
        let up_to_alarm = fed.iter().filter(|&&t| t <= 6 * SECOND).count();
        assert!(
            seen >= up_to_alarm && seen < fed.len(),
            "{seen} records at the trigger"
        );
        assert!(matches!(rt.block_on(answer), Ok(Ok(None))));
        assert_eq!(
            telemetry.reorder(),
            (0, 0, 0),
            "nothing left held or fed late"
        );
    }

    #[test]
    fn without_the_reorder_stage_otlp_batches_go_as_they_come() {
        let rt = runtime();
        let engine = crate::pipeline::test_support::Recording::default();
        let fed = engine.fed.clone();
        let task = task_with(
            Box::new(engine),
            Vec::new(),
            Arc::new(Telemetry::default()),
            Duration::from_secs(1),
        );
        let (tx, rx) = queue::bounded(16);
        let (_cmd_tx, cmd_rx) = mpsc::channel(4);
        for b in [otlp(1, 0, 5), otlp(2, 0, 5)] {
            rt.block_on(tx.send(b)).expect("queue open");
        }
        drop(tx);
        task.run(rt.handle().clone(), rx, cmd_rx);
        let fed = fed.lock().expect("lock").clone();
        assert_eq!(fed.len(), 1_000);
        // Off: nothing held, nothing counted.
        assert!(
            fed.windows(2).any(|w| w[0] > w[1]),
            "the second process's batch goes back in time"
        );
    }

    /// `sh` is analysed in the slot an eviction freed in the engine (its own cap would
    /// drop it otherwise).
    fn sh_is_analysed_in_the_freed_slot(task: &mut EngineTask) {
        task.ingest(batch_of("sh", 31, 40));
        assert!(task
            .engine
            .trigger("sh", 35 * SECOND)
            .expect("call")
            .is_some());
        assert_eq!(task.engine.counters().expect("counters").dropped_targets, 0);
    }

    /// `process`'s `read`s (one thread) over `[from_s, to_s)`, from perf.
    fn batch_of(process: &str, from_s: u64, to_s: u64) -> EventBatch {
        let mut b = batch(1, from_s, to_s);
        b.process.comm = Some(process.into());
        b
    }

    /// [`batch`] of `tid` from `from_s` for 30 s, of a process on `host`.
    fn on_host(host: &str, tid: u32, from_s: u64) -> EventBatch {
        let b = batch(tid, from_s, from_s + 30);
        EventBatch {
            process: ProcessInfo {
                host: Some(host.into()),
                ..b.process.clone()
            },
            ..b
        }
    }

    /// A configured target `db` (process `db`) and its calibrated parameters (α 2.4).
    fn calibrated_db() -> (Vec<crate::config::TargetConfig>, Vec<(String, Params)>) {
        let cfg = vec![crate::config::TargetConfig {
            name: "db".into(),
            process_names: vec!["db".into()],
            ..Default::default()
        }];
        let calibrated = Params {
            alpha_seconds: 2.4,
            ..Params::default()
        };
        (cfg, vec![("db".into(), calibrated)])
    }

    #[test]
    fn another_hosts_processes_of_a_configured_target_are_analysed_apart_with_its_parameters() {
        let rt = runtime();
        let kept = Arc::new(std::sync::Mutex::new(Vec::new()));
        let engine = Box::new(NativeHost::new(Params::default(), true).expect("engine"));
        let (cfg, calibrated) = calibrated_db();
        let task = EngineTask::new(
            engine,
            Router::new(&cfg, 4).with_local_host(Some("db-1".into())),
            calibrated,
            vec![Box::new(Keeping(kept.clone()))],
            Arc::new(Telemetry::default()),
            Duration::from_secs(5),
            Duration::from_secs(1),
        )
        .expect("task");
        let (tx, rx) = queue::bounded(8);
        let (cmd_tx, cmd_rx) = mpsc::channel(4);
        // The same tids on both hosts: were they one target, they would be one thread.
        let on = |host: &str, tid: u32| on_host(host, tid, 0);
        for b in [on("db-1", 11), on("db-1", 12), on("db-2", 11)] {
            rt.block_on(tx.send(b)).expect("queue open");
        }
        drop(tx);
        drop(cmd_tx);
        task.run(rt.handle().clone(), rx, cmd_rx);
        let kept = kept.lock().expect("lock");
        let mut finals: Vec<(String, u64, f64)> = kept
            .iter()
            .filter(|r| r.trigger == faultline_engine::report::Trigger::EndOfStream)
            .map(|r| {
                (
                    r.target.clone(),
                    r.threads.total,
                    r.parameters.alpha_seconds,
                )
            })
            .collect();
        finals.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            finals,
            [("db".into(), 2, 2.4), ("db@db-2".into(), 1, 2.4)],
            "each host's threads apart, both with the configured α"
        );
    }

    #[test]
    fn a_new_name_evicts_an_idle_discovered_target_everywhere_and_is_capped_otherwise() {
        use crate::config::PrometheusSinkConfig;
        use crate::pipeline::router::DISCOVERED_IDLE;

        let params = Params {
            max_targets: 2,
            ..Params::default()
        };
        let engine = Box::new(NativeHost::new(params, false).expect("engine"));
        let telemetry = Arc::new(Telemetry::default());
        let (sink, exporter) =
            crate::sinks::prometheus::new(&PrometheusSinkConfig::default(), telemetry.clone());
        let (wall_s, clock) = settable_clock();
        let mut task = EngineTask::new(
            engine,
            Router::new(&[], 2),
            Vec::new(),
            vec![Box::new(sink)],
            telemetry.clone(),
            Duration::from_secs(5),
            Duration::from_secs(60),
        )
        .expect("task")
        .with_clock(clock);
        let exported = |name: &str| {
            let text = exporter.encode().expect("encode");
            text.contains(&format!("target=\"{name}\""))
        };

        // Two targets with reports (the Prometheus sink exports their series).
        task.ingest(batch_of("curl", 0, 30));
        task.ingest(batch_of("web", 0, 30));
        assert!(exported("curl") && exported("web"));
        // A trigger ahead of curl's data waits for it.
        let (reply, mut answer) = oneshot::channel();
        let at_ns = 100 * SECOND;
        task.command(
            EngineCommand::Trigger {
                target: "curl".into(),
                at_ns,
                reply,
            },
            false,
        );
        assert!(answer.try_recv().is_err(), "parked");

        // `web` keeps making calls; `curl` makes none for DISCOVERED_IDLE.
        wall_s.store(DISCOVERED_IDLE.as_secs() - 1, Ordering::Relaxed);
        task.ingest(batch_of("web", 30, 31));
        wall_s.store(DISCOVERED_IDLE.as_secs(), Ordering::Relaxed);
        task.ingest(batch_of("sh", 30, 31));

        let perf = telemetry.source("perf");
        assert_eq!(perf.dropped(DropReason::Capped), 0, "`sh` took curl's slot");
        assert_eq!(telemetry.targets_evicted(), 1);
        let forgotten = task
            .engine
            .trigger("curl", 20 * SECOND)
            .expect("engine call");
        assert_eq!(forgotten, None, "the engine no longer has curl");
        assert!(task
            .engine
            .trigger("web", 20 * SECOND)
            .expect("call")
            .is_some());
        assert!(!exported("curl"), "curl's series are gone from /metrics");
        assert!(exported("web"));
        assert!(
            matches!(answer.try_recv(), Ok(Ok(None))),
            "the parked trigger is answered as for an unknown target"
        );
        let text = exporter.encode().expect("encode");
        assert!(text.contains("faultline_targets_evicted_total 1"), "{text}");
        // `sh` is analysed in the slot the engine freed (its own cap would drop it).
        sh_is_analysed_in_the_freed_slot(&mut task);

        // A fourth name while both targets made calls recently: capped, nothing evicted.
        wall_s.store(DISCOVERED_IDLE.as_secs() + 60, Ordering::Relaxed);
        let events = batch_of("cron", 40, 41).events.len() as u64;
        task.ingest(batch_of("cron", 40, 41));
        assert_eq!(perf.dropped(DropReason::Capped), events);
        assert_eq!(telemetry.targets_evicted(), 1);
        assert!(exported("web"));
    }

    #[test]
    fn a_target_whose_calls_keep_trapping_is_quarantined_and_the_others_go_on() {
        use crate::config::PrometheusSinkConfig;
        use crate::pipeline::quarantine::{FIRST_QUARANTINE, TRAPS_TO_QUARANTINE};
        use std::sync::atomic::AtomicU64;

        let ingests = Arc::new(AtomicU64::new(0));
        let engine = Box::new(Trapping {
            native: NativeHost::new(Params::default(), false).expect("engine"),
            on_finish: false,
            ingest_of: Arc::new(std::sync::Mutex::new(Some("poison"))),
            ingests: ingests.clone(),
        });
        let telemetry = Arc::new(Telemetry::default());
        let (sink, exporter) =
            crate::sinks::prometheus::new(&PrometheusSinkConfig::default(), telemetry.clone());
        let (wall_s, clock) = settable_clock();
        let mut task = task_with(
            engine,
            vec![Box::new(sink)],
            telemetry.clone(),
            Duration::from_secs(60),
        )
        .with_clock(clock);
        let perf = telemetry.source("perf");
        let sample = |name: &str| {
            let text = exporter.encode().expect("encode");
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or_else(|| panic!("{name} missing:\n{text}"))
        };

        task.ingest(batch_of("web", 0, 30));
        // A trigger on the poison target, parked ahead of its data.
        let (reply, mut parked) = oneshot::channel();
        task.command(
            EngineCommand::Trigger {
                target: "poison".into(),
                at_ns: 100 * SECOND,
                reply,
            },
            // Taken between batches: it waits for the target's first data.
            true,
        );
        let events = batch_of("poison", 0, 1).events.len() as u64;
        for i in 0..TRAPS_TO_QUARANTINE as u64 {
            assert_eq!(
                sample("faultline_targets_quarantined"),
                0.0,
                "after {i} traps"
            );
            wall_s.store(i * 60, Ordering::Relaxed);
            task.ingest(batch_of("poison", i, i + 1));
        }
        assert_eq!(perf.dropped(DropReason::EngineError), 3 * events);
        assert_eq!(sample("faultline_targets_quarantined"), 1.0);
        assert_eq!(sample("faultline_target_quarantines_total"), 1.0);
        let answer = parked
            .try_recv()
            .expect("answered when the quarantine began");
        assert!(
            answer.as_ref().is_err_and(|e| e.contains("quarantined")),
            "{answer:?}"
        );

        // Its batches no longer reach the engine; the other target's do, and it keeps its
        // state: a trigger on it still finds its first 30 s.
        let calls = ingests.load(Ordering::Relaxed);
        task.ingest(batch_of("poison", 3, 4));
        assert_eq!(
            ingests.load(Ordering::Relaxed),
            calls,
            "not handed to the engine"
        );
        assert_eq!(perf.dropped(DropReason::Quarantined), events);
        task.ingest(batch_of("web", 30, 40));
        assert_eq!(ingests.load(Ordering::Relaxed), calls + 1);
        assert!(task
            .engine
            .trigger("web", 20 * SECOND)
            .expect("call")
            .is_some());
        let (reply, mut refused) = oneshot::channel();
        task.command(
            EngineCommand::Trigger {
                target: "poison".into(),
                at_ns: SECOND,
                reply,
            },
            false,
        );
        assert!(
            refused
                .try_recv()
                .is_ok_and(|a| a.is_err_and(|e| e.contains("quarantined for another"))),
            "a trigger during the quarantine is refused at once"
        );

        // Over: analysed again (here it traps again, which counts afresh).
        wall_s.store(120 + FIRST_QUARANTINE.as_secs(), Ordering::Relaxed);
        task.ingest(batch_of("poison", 4, 5));
        assert_eq!(ingests.load(Ordering::Relaxed), calls + 2);
        assert_eq!(sample("faultline_targets_quarantined"), 0.0);
        assert_eq!(perf.dropped(DropReason::Quarantined), events);
        assert_eq!(perf.dropped(DropReason::EngineError), 4 * events);
    }

    /// An engine task over a native engine and a router of two discovered targets each,
    /// with `sinks`, on a settable clock (see [`settable_clock`]).
    fn two_slot_task(
        engine: Box<dyn EngineHost>,
        sinks: Vec<Box<dyn ReportSink>>,
    ) -> (EngineTask, Arc<std::sync::atomic::AtomicU64>) {
        let (wall_s, clock) = settable_clock();
        let task = EngineTask::new(
            engine,
            Router::new(&[], 2),
            Vec::new(),
            sinks,
            Arc::new(Telemetry::default()),
            Duration::from_secs(5),
            Duration::from_secs(60),
        )
        .expect("task")
        .with_clock(clock);
        (task, wall_s)
    }

    /// A native engine of two targets at most.
    fn two_target_engine() -> Box<dyn EngineHost> {
        let params = Params {
            max_targets: 2,
            ..Params::default()
        };
        Box::new(NativeHost::new(params, false).expect("engine"))
    }

    /// `web` makes calls while `curl` makes none for `DISCOVERED_IDLE`; then `sh`, a third
    /// name, takes curl's slot (as in
    /// `a_new_name_evicts_an_idle_discovered_target_everywhere_and_is_capped_otherwise`).
    fn evict_curl_for_sh(task: &mut EngineTask, wall_s: &std::sync::atomic::AtomicU64) {
        use crate::pipeline::router::DISCOVERED_IDLE;
        wall_s.store(DISCOVERED_IDLE.as_secs() - 1, Ordering::Relaxed);
        task.ingest(batch_of("web", 30, 31));
        let evicted = task.telemetry.targets_evicted();
        wall_s.store(DISCOVERED_IDLE.as_secs(), Ordering::Relaxed);
        task.ingest(batch_of("sh", 30, 31));
        assert_eq!(
            task.telemetry.targets_evicted(),
            evicted + 1,
            "sh evicted curl"
        );
    }

    /// An on-demand diagnosis of `target` at `at_ns`, with its data already past it:
    /// answered (and published) at once.
    fn trigger_now(task: &mut EngineTask, target: &str, at_ns: u64) -> Option<Report> {
        let (reply, mut answer) = oneshot::channel();
        let target = target.to_owned();
        task.command(
            EngineCommand::Trigger {
                target,
                at_ns,
                reply,
            },
            false,
        );
        answer
            .try_recv()
            .expect("answered at once")
            .expect("no engine error")
    }

    /// A fleet that scales: hosts of a configured service come and go through a gateway.
    /// Each new host's target takes the configured parameters, also once the earlier
    /// hosts' targets, idle, gave their slots (router and engine parameters) to new ones.
    #[test]
    fn hosts_that_come_and_go_keep_getting_their_configured_targets_parameters() {
        use crate::pipeline::router::DISCOVERED_IDLE;

        let (cfg, calibrated) = calibrated_db();
        let kept = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (wall_s, clock) = settable_clock();
        let mut task = EngineTask::new(
            two_target_engine(),
            Router::new(&cfg, 2).with_local_host(Some("db-1".into())),
            calibrated,
            vec![Box::new(Keeping(kept.clone()))],
            Arc::new(Telemetry::default()),
            Duration::from_secs(5),
            Duration::from_secs(60),
        )
        .expect("task")
        .with_clock(clock);
        let on = |host: &str, from_s: u64| on_host(host, 11, from_s);
        // db@db-2, then db@db-3 and db@db-4, each after the one before fell idle; two
        // slots (db and one other host's) in the router and the engine's parameters.
        for (i, host) in ["db-2", "db-3", "db-4"].into_iter().enumerate() {
            wall_s.store(i as u64 * DISCOVERED_IDLE.as_secs(), Ordering::Relaxed);
            task.ingest(on(host, i as u64 * 40));
            let at = (i as u64 * 40 + 25) * SECOND;
            let report = trigger_now(&mut task, &format!("db@{host}"), at);
            let alpha = report.map(|r| r.parameters.alpha_seconds);
            assert_eq!(alpha, Some(2.4), "{host}");
        }
        assert_eq!(task.telemetry.targets_evicted(), 2);
    }

    #[test]
    fn an_evicted_target_leaves_the_report_store_and_its_place_goes_to_the_new_one() {
        use crate::pipeline::latest::{LatestReports, LatestReportsSink};

        // `GET /report`'s store, for as many targets as the router.
        let store = Arc::new(LatestReports::new(2));
        let sink = LatestReportsSink(store.clone());
        let (mut task, wall_s) = two_slot_task(two_target_engine(), vec![Box::new(sink)]);
        task.ingest(batch_of("curl", 0, 30));
        task.ingest(batch_of("web", 0, 30));
        assert!(store.get("curl").is_some() && store.get("web").is_some());

        evict_curl_for_sh(&mut task, &wall_s);
        assert!(store.get("curl").is_none(), "curl's report is gone");
        let web = store.get("web").expect("web's latest report stays");
        assert_eq!(web.target, "web");
        // sh's report takes the place curl's left (the store is full otherwise).
        task.ingest(batch_of("sh", 31, 40));
        assert!(trigger_now(&mut task, "sh", 35 * SECOND).is_some());
        let names: Vec<String> = store.all().into_iter().map(|r| r.target).collect();
        assert_eq!(names, ["sh", "web"]);
        assert_eq!(store.capped(), 0);
    }

    #[test]
    fn an_evicted_target_leaves_the_silence_watch_and_its_slot_goes_to_the_new_one() {
        use crate::pipeline::process_state::Probe;

        let (task, wall_s) = two_slot_task(two_target_engine(), Vec::new());
        // Watching perf's targets, as many as the router routes.
        let watch = SilenceWatch::new(Duration::from_millis(1), vec!["perf"], 2);
        let mut task = task.with_silence_watch(watch);
        task.ingest(batch_of("curl", 0, 30));
        task.ingest(batch_of("web", 0, 30));
        let due = |task: &mut EngineTask| {
            let watch = task.silence.as_mut().expect("a silence watch");
            let later = Instant::now() + Duration::from_secs(3_600);
            let probe = |_: &[u32]| Probe {
                still: Stillness::Unknown,
                cost: 1,
            };
            let check = watch.due(later, |_| true, |_| true, probe);
            check.due.into_iter().map(|d| d.target).collect::<Vec<_>>()
        };
        assert_eq!(due(&mut task), ["curl", "web"]);

        evict_curl_for_sh(&mut task, &wall_s);
        // Nothing due for curl (its clock is not moved, nor reported on), and sh took its
        // slot (the watch keeps two targets at most).
        assert_eq!(due(&mut task), ["sh", "web"]);
    }

    /// `otlp`'s batch of process `pid` of service `name`.
    fn otlp_of(name: &str, pid: u32, from_s: u64, to_s: u64) -> EventBatch {
        let mut b = otlp(pid, from_s, to_s);
        b.process.comm = Some(name.into());
        b
    }

    #[test]
    fn otlp_records_held_for_an_evicted_target_are_analysed_before_it_is_forgotten() {
        let (task, wall_s) = two_slot_task(two_target_engine(), Vec::new());
        let mut task = task.with_reorder(30.0);
        let events = |task: &mut EngineTask| task.engine.counters().expect("counters").events;
        task.ingest(batch_of("web", 0, 30));
        // Two processes of curl: process 2 sent 9 s past process 1, which holds most of
        // it back until process 1 sends past it (or goes quiet).
        task.ingest(otlp_of("curl", 1, 0, 1));
        task.ingest(otlp_of("curl", 2, 0, 10));
        let held = task.reorder.held() as u64;
        assert!(held > 800, "{held} records held");
        let before = events(&mut task);

        evict_curl_for_sh(&mut task, &wall_s);
        assert_eq!(task.reorder.held(), 0);
        let fed = batch_of("web", 30, 31).events.len() + batch_of("sh", 30, 31).events.len();
        assert_eq!(
            events(&mut task),
            before + held + fed as u64,
            "the held records reached the engine"
        );
        // ... before the engine forgot curl: fed after, they would have made it again,
        // in the slot sh needs.
        assert_eq!(task.engine.trigger("curl", 5 * SECOND).expect("call"), None);
        sh_is_analysed_in_the_freed_slot(&mut task);
        let otlp = task.telemetry.source(crate::sources::otlp::GRPC_SOURCE);
        assert_eq!(otlp.dropped(DropReason::Quarantined), 0);
    }

    #[test]
    fn a_quarantined_target_leaves_the_report_store_and_its_held_records_count_as_quarantined() {
        use crate::pipeline::latest::{LatestReports, LatestReportsSink};

        let trap_of = Arc::new(std::sync::Mutex::new(None));
        let engine = Box::new(Trapping {
            native: NativeHost::new(Params::default(), false).expect("engine"),
            on_finish: false,
            ingest_of: trap_of.clone(),
            ingests: Arc::default(),
        });
        let store = Arc::new(LatestReports::new(4));
        let telemetry = Arc::new(Telemetry::default());
        let mut task = task_with(
            engine,
            vec![Box::new(LatestReportsSink(store.clone()))],
            telemetry.clone(),
            Duration::from_secs(60),
        )
        .with_reorder(30.0);
        task.ingest(batch_of("web", 0, 30));
        // One process of poison: nothing held, its records analysed, its reports kept.
        task.ingest(otlp_of("poison", 1, 0, 30));
        assert!(store.get("poison").is_some() && store.get("web").is_some());
        assert_eq!(task.reorder.held(), 0);

        // Now its calls trap. Process 1's next second goes at once (trap 1); a second
        // process's first second goes but for its last record (trap 2); process 1's next
        // four seconds wait behind that record, which they let go (trap 3).
        *trap_of.lock().expect("trapping target") = Some("poison");
        task.ingest(otlp_of("poison", 1, 30, 31));
        task.ingest(otlp_of("poison", 2, 30, 31));
        let held = otlp_of("poison", 1, 31, 35).events.len() as u64;
        task.ingest(otlp_of("poison", 1, 31, 35));
        assert_eq!(telemetry.targets_quarantined(), 1);

        let otlp = telemetry.source(crate::sources::otlp::GRPC_SOURCE);
        assert_eq!(
            otlp.dropped(DropReason::Quarantined),
            held,
            "the records held for it are counted as quarantined"
        );
        // The trapped records: 100, 99 and 1.
        assert_eq!(otlp.dropped(DropReason::EngineError), 200);
        assert_eq!(task.reorder.held(), 0);
        assert!(store.get("poison").is_none(), "poison's report is gone");
        assert_eq!(
            store.get("web").map(|r| r.target),
            Some("web".to_owned()),
            "web's latest report stays"
        );
    }
}
