//! Feeds a generated stream through a default engine the way a source hands it over
//! (batches of 4,096), for the scenario tests that judge continuous reports and an
//! on-demand alarm of the same stream.
//!
//! Include with `#[path = "common/replay.rs"] mod replay;`.

use faultline_engine::report::Report;
use faultline_engine::{Engine, Params, SyscallEvent};

/// Every continuous report whose window ends after `after_ns`, and the on-demand report
/// for an alarm at `alarm_ns`, of `events` ingested as target `target`.
pub fn reports_and_alarm(
    target: &str,
    events: &[SyscallEvent],
    after_ns: u64,
    alarm_ns: u64,
) -> (Vec<Report>, Report) {
    let mut engine = Engine::new(Params::default()).expect("defaults");
    let mut reports = Vec::new();
    for c in events.chunks(4096) {
        engine.ingest(target, c);
        reports.extend(engine.take_reports());
    }
    let alarm = engine.trigger(target, alarm_ns).expect("report");
    reports.retain(|r| r.window_end_ns > after_ns);
    (reports, alarm)
}
