//! On-demand triggers that wait for their target's events to reach the alarm time.
//!
//! Live sources deliver with a lag: perf flushes its ring buffers and `perf script` its
//! output every few seconds, OTLP exporters batch. An alarm raised at wall-clock time T
//! therefore finds the engine's stream still short of T, and a diagnosis made at once
//! misses the very calls that set off the alarm (three live cases of the 2026-11-23 full
//! run read `none` that way). A trigger whose target has data, but not yet up to the
//! alarm, is parked here until the target's events pass the alarm time or a wall-clock
//! deadline expires, whichever comes first.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use faultline_engine::clock_screen::{JUMP_CONFIRM_EVENTS, MAX_CLOCK_JUMP_NS};
use faultline_engine::{EventKind, Report, SyscallEvent};
use tokio::sync::oneshot;

/// The answer channel of one on-demand trigger (`Err` is a message for the HTTP client).
pub type TriggerReply = oneshot::Sender<Result<Option<Report>, String>>;

/// Triggers parked at once; one more is answered immediately rather than queued, so a
/// flood of alarms cannot grow this list (the command queue in front is bounded too).
pub const MAX_WAITING: usize = 64;

/// One parked trigger.
#[derive(Debug)]
pub struct Waiting {
    pub target: String,
    pub at_ns: u64,
    pub reply: TriggerReply,
    deadline: Instant,
}

/// The targets' event clocks and the triggers waiting on them.
#[derive(Debug)]
pub struct TriggerWait {
    wait: Duration,
    /// Latest event time per target; as many entries as the router allows targets.
    clocks: HashMap<Arc<str>, u64>,
    /// Per target, records in a row more than the engine's clock bound ahead of its clock
    /// (see [`TriggerWait::observe`]); an entry only while such a run lasts.
    far_runs: HashMap<Arc<str>, u64>,
    waiting: Vec<Waiting>,
}

impl TriggerWait {
    /// Triggers wait at most `wait` (wall clock); zero answers every trigger at once.
    pub fn new(wait: Duration) -> Self {
        Self {
            wait,
            clocks: HashMap::new(),
            far_runs: HashMap::new(),
            waiting: Vec::new(),
        }
    }

    /// Advances `target`'s clock past the events just handed to the engine. Not past TCP
    /// segment records: their sampler reads the counters as they are now, seconds ahead
    /// of the calls a trigger waits for (as in the engine's own clock). Nor past a record
    /// stamped more than the engine's clock bound ahead (a garbage time, which the engine
    /// leaves out): the clock would stand a day ahead, and every later trigger be answered
    /// at once, before its data. As in the engine, [`JUMP_CONFIRM_EVENTS`] such records in
    /// a row, with none near, say the source's clock really jumped.
    pub fn observe(&mut self, target: &Arc<str>, events: &[SyscallEvent]) {
        let calls = || events.iter().filter(|e| e.kind != EventKind::TcpSegments);
        let Some(latest) = calls().map(|e| e.ts_ns).max() else {
            return;
        };
        let Some(c) = self.clocks.get_mut(target) else {
            self.clocks.insert(target.clone(), latest);
            return;
        };
        let bound = c.saturating_add(MAX_CLOCK_JUMP_NS);
        if latest <= bound {
            *c = (*c).max(latest);
            self.far_runs.remove(target);
            return;
        }
        match calls().map(|e| e.ts_ns).filter(|&t| t <= bound).max() {
            Some(near) => {
                *c = (*c).max(near);
                self.far_runs.remove(target);
            }
            None => {
                let run = self.far_runs.entry(target.clone()).or_default();
                *run = run.saturating_add(calls().count() as u64);
                if *run >= JUMP_CONFIRM_EVENTS {
                    *c = latest;
                    self.far_runs.remove(target);
                }
            }
        }
    }

    /// Moves `target`'s clock to `now_ns`: the engine's clock of that silent target was
    /// moved on (see [`super::silence`]), so a trigger up to there need not wait for data.
    pub fn advance(&mut self, target: &str, now_ns: u64) {
        if let Some(c) = self.clocks.get_mut(target) {
            *c = (*c).max(now_ns);
        }
    }

    /// Parks a trigger whose target has data that does not reach `at_ns` yet; hands it
    /// back when it should be answered now (no wait configured, data already past the
    /// alarm, too many parked, or no data at all for the target unless `queued`).
    /// `queued`: taken while batches are still queued, where a target with no data yet
    /// may have its first batches (a backlog at startup), so it waits like one whose data
    /// is behind instead of being answered "no data" at once.
    pub fn park(
        &mut self,
        target: String,
        at_ns: u64,
        reply: TriggerReply,
        now: Instant,
        queued: bool,
    ) -> Option<Waiting> {
        let behind = match self.clocks.get(target.as_str()) {
            Some(&clock) => clock < at_ns,
            None => queued,
        };
        let w = Waiting {
            target,
            at_ns,
            reply,
            deadline: now + self.wait,
        };
        if self.wait.is_zero() || !behind || self.waiting.len() >= MAX_WAITING {
            return Some(w);
        }
        self.waiting.push(w);
        None
    }

    /// Parked triggers that are due: their target's events reached the alarm, the
    /// deadline passed, or the client gave up (answering those frees their slot).
    pub fn take_due(&mut self, now: Instant) -> Vec<Waiting> {
        let clocks = &self.clocks;
        let (due, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|w| {
                now >= w.deadline
                    || w.reply.is_closed()
                    || clocks.get(w.target.as_str()).is_some_and(|&c| c >= w.at_ns)
            });
        self.waiting = keep;
        due
    }

    /// Drops `target`'s clock (the router evicted it) and hands back the triggers parked
    /// on it: no data will come for them.
    pub fn forget(&mut self, target: &str) -> Vec<Waiting> {
        self.clocks.remove(target);
        self.far_runs.remove(target);
        let (gone, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|w| w.target == target);
        self.waiting = keep;
        gone
    }

    /// Every parked trigger (end of stream: no more data will come).
    pub fn drain(&mut self) -> Vec<Waiting> {
        std::mem::take(&mut self.waiting)
    }

    /// When the earliest parked trigger must be answered, if any is parked.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.waiting.iter().map(|w| w.deadline).min()
    }

    /// Number of parked triggers.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// True when no trigger is parked.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faultline_engine::syscalls::SyscallId;

    fn ev(ts_ns: u64) -> SyscallEvent {
        SyscallEvent::complete(1, 1, SyscallId::from_name("read"), ts_ns, 10)
    }

    fn reply() -> (
        TriggerReply,
        oneshot::Receiver<Result<Option<Report>, String>>,
    ) {
        oneshot::channel()
    }

    #[test]
    fn a_trigger_ahead_of_the_data_waits_until_the_data_passes_it() {
        let mut w = TriggerWait::new(Duration::from_secs(10));
        let t: Arc<str> = Arc::from("db");
        let now = Instant::now();
        w.observe(&t, &[ev(100), ev(900), ev(500)]);
        let (tx, _rx) = reply();
        assert!(
            w.park("db".into(), 1_000, tx, now, false).is_none(),
            "parked"
        );
        assert!(w.take_due(now).is_empty(), "data still short of the alarm");
        w.observe(&t, &[ev(999)]);
        assert!(w.take_due(now).is_empty());
        w.observe(&t, &[ev(1_000)]);
        let due = w.take_due(now);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].at_ns, 1_000);
        assert!(w.is_empty());
    }

    /// The TCP sampler's records come in seconds ahead of the calls: a trigger still
    /// waits for the calls to reach the alarm.
    #[test]
    fn tcp_segment_records_ahead_of_the_calls_do_not_answer_a_trigger() {
        let mut w = TriggerWait::new(Duration::from_secs(10));
        let t: Arc<str> = Arc::from("web");
        let now = Instant::now();
        w.observe(&t, &[ev(100)]);
        let (tx, _rx) = reply();
        assert!(w.park("web".into(), 1_000, tx, now, false).is_none());
        w.observe(&t, &[SyscallEvent::tcp_segments(1, 3_000, 10, 1)]);
        assert!(
            w.take_due(now).is_empty(),
            "the calls are still short of it"
        );
        w.observe(
            &t,
            &[ev(1_000), SyscallEvent::tcp_segments(1, 4_000, 10, 1)],
        );
        assert_eq!(w.take_due(now).len(), 1);
    }

    #[test]
    fn a_record_stamped_far_ahead_does_not_answer_triggers_before_their_data() {
        let mut w = TriggerWait::new(Duration::from_secs(10));
        let t: Arc<str> = Arc::from("api");
        let now = Instant::now();
        let day = 86_400_000_000_000;
        w.observe(&t, &[ev(100)]);
        // A garbage time with a near record, then alone: the clock takes the near one.
        w.observe(&t, &[ev(200), ev(day)]);
        w.observe(&t, &[ev(2 * day)]);
        let (tx, _rx) = reply();
        assert!(
            w.park("api".into(), 1_000, tx, now, false).is_none(),
            "waits"
        );
        assert!(w.take_due(now).is_empty());
        // The source's clock jumped for real: enough far records in a row move it.
        let far: Vec<_> = (0..JUMP_CONFIRM_EVENTS).map(|i| ev(day + i)).collect();
        w.observe(&t, &far);
        assert_eq!(w.take_due(now).len(), 1);
    }

    #[test]
    fn the_deadline_answers_a_trigger_whose_data_never_comes() {
        let mut w = TriggerWait::new(Duration::from_millis(200));
        let t: Arc<str> = Arc::from("db");
        let now = Instant::now();
        w.observe(&t, &[ev(10)]);
        let (tx, _rx) = reply();
        assert!(w.park("db".into(), 1_000, tx, now, false).is_none());
        assert_eq!(w.next_deadline(), Some(now + Duration::from_millis(200)));
        assert!(w.take_due(now + Duration::from_millis(199)).is_empty());
        assert_eq!(w.take_due(now + Duration::from_millis(200)).len(), 1);
        assert_eq!(w.next_deadline(), None);
    }

    #[test]
    fn triggers_that_cannot_gain_from_waiting_are_answered_at_once() {
        let now = Instant::now();
        let t: Arc<str> = Arc::from("db");
        // Unknown target (no data at all), data already past the alarm, and no wait.
        let mut w = TriggerWait::new(Duration::from_secs(10));
        w.observe(&t, &[ev(2_000)]);
        assert!(w
            .park("other".into(), 1_000, reply().0, now, false)
            .is_some());
        assert!(w.park("db".into(), 1_000, reply().0, now, false).is_some());
        let mut zero = TriggerWait::new(Duration::ZERO);
        zero.observe(&t, &[ev(10)]);
        assert!(zero
            .park("db".into(), 1_000, reply().0, now, false)
            .is_some());
        // An empty batch does not create a clock.
        let mut empty = TriggerWait::new(Duration::from_secs(10));
        empty.observe(&t, &[]);
        assert!(empty
            .park("db".into(), 1_000, reply().0, now, false)
            .is_some());
    }

    #[test]
    fn a_trigger_taken_with_batches_queued_waits_for_a_target_not_seen_yet() {
        let now = Instant::now();
        let mut w = TriggerWait::new(Duration::from_secs(10));
        let (tx, _rx) = reply();
        assert!(
            w.park("db".into(), 1_000, tx, now, true).is_none(),
            "parked"
        );
        assert!(w.take_due(now).is_empty());
        // Its first batch comes out of the backlog, past the alarm.
        w.observe(&Arc::from("db"), &[ev(1_500)]);
        assert_eq!(w.take_due(now).len(), 1);
        // With the queue empty, no data means no data.
        assert!(w.park("db2".into(), 1_000, reply().0, now, false).is_some());
    }

    #[test]
    fn parked_triggers_are_bounded_and_a_gone_client_frees_its_slot() {
        let now = Instant::now();
        let t: Arc<str> = Arc::from("db");
        let mut w = TriggerWait::new(Duration::from_secs(10));
        w.observe(&t, &[ev(10)]);
        let mut receivers = Vec::new();
        for _ in 0..MAX_WAITING {
            let (tx, rx) = reply();
            receivers.push(rx);
            assert!(w.park("db".into(), 1_000, tx, now, false).is_none());
        }
        assert!(
            w.park("db".into(), 1_000, reply().0, now, false).is_some(),
            "full"
        );
        assert_eq!(w.len(), MAX_WAITING);
        drop(receivers.pop());
        assert_eq!(w.take_due(now).len(), 1, "the closed reply is due");
        assert_eq!(w.drain().len(), MAX_WAITING - 1);
    }
}
