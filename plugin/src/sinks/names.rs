//! Metric names and label keys shared by the Prometheus sink (`prometheus.rs`) and the OTLP
//! push sink (`otlp.rs`), so both export the same series (docs/metrics.md). Counter names
//! have no `_total`: the OpenMetrics encoder appends it, OTLP has no such suffix.

use crate::pipeline::telemetry::SegmentCounts;
use faultline_engine::report::ThreadCounts;
use faultline_engine::symptoms::Symptom;
use faultline_engine::vital_signs::{SignRates, VitalSigns};

pub const BUILD_INFO: &str = "faultline_build_info";
pub const TARGETS: &str = "faultline_targets";
pub const IMPACT_FACTOR: &str = "faultline_impact_factor_ratio";
pub const IMPACT_FACTOR_FILTERED: &str = "faultline_impact_factor_filtered_ratio";
pub const ONSET_DISPERSION: &str = "faultline_onset_dispersion_seconds";
/// Gauge, per target: the median share of their time the affected threads lost.
pub const TIME_LOST: &str = "faultline_time_lost_ratio";
pub const ANOMALY_ONSET: &str = "faultline_anomaly_onset_timestamp_seconds";
pub const LAST_REPORT: &str = "faultline_last_report_timestamp_seconds";
/// Gauge, per target: seconds from its latest record to its last report's window end.
pub const SILENT: &str = "faultline_silent_seconds";
pub const VERDICT: &str = "faultline_verdict";
pub const SUBSYSTEM: &str = "faultline_subsystem";
pub const DIAGNOSIS_INFO: &str = "faultline_diagnosis_info";
pub const THREADS: &str = "faultline_threads";
pub const AFFECTED_SYSCALL_INCREASE: &str = "faultline_affected_syscall_increase_ratio";
pub const SYSCALL_MEAN_LATENCY: &str = "faultline_syscall_mean_latency_seconds";
pub const SYSCALL_CALLS_PER_SECOND: &str = "faultline_syscall_calls_per_second";
/// Gauge, per target and `sign`: a ratio of the target's hardware counters.
pub const VITAL_SIGN: &str = "faultline_vital_sign";
/// Gauge, per target and `symptom`: 1 while the target's totals show it.
pub const SYMPTOM: &str = "faultline_symptom";
/// Gauge, per target and `symptom`: listed threads whose own counters show it.
pub const SYMPTOM_THREADS: &str = "faultline_symptom_threads";
/// Counter.
pub const REPORTS: &str = "faultline_reports";
/// Counter.
pub const SERIES_CAPPED: &str = "faultline_series_capped";
/// Counter.
pub const REPORT_STORE_CAPPED: &str = "faultline_report_store_capped";
/// Counter.
pub const EVENTS_RECEIVED: &str = "faultline_events_received";
/// Counter.
pub const EVENTS_DROPPED: &str = "faultline_events_dropped";
/// Counter.
pub const DECODE_ERRORS: &str = "faultline_decode_errors";
/// Gauge, per live capture: 1 while it reads, 0 once it ended, failed or was stopped.
pub const SOURCE_UP: &str = "faultline_source_up";
/// Gauge: 1 while the engine thread runs, 0 once it ended. Sources keep accepting and
/// counting events after it died, so without it only `/healthz` shows that nothing is
/// analysed any more (an OTLP-fed setup has no other alert for it).
pub const ENGINE_UP: &str = "faultline_engine_up";
/// [`ENGINE_UP`]'s help, the same in both sinks.
pub const ENGINE_UP_HELP: &str = "1 while faultline's analysis engine thread runs, 0 once it ended (a panic): nothing is analysed, /healthz answers 503, and faultline shuts down and exits 1 for its supervisor to restart it";
/// Counter, by `signal`.
pub const OTLP_EXPORT_FAILURES: &str = "faultline_otlp_export_failures";
/// Gauge: verdict records the OTLP collector refused, kept to be sent again.
pub const OTLP_VERDICTS_PENDING: &str = "faultline_otlp_verdict_records_pending";
/// Counter: verdict records given up on (the pending cap, or still refused at shutdown).
pub const OTLP_VERDICTS_LOST: &str = "faultline_otlp_verdict_records_lost";
/// One exported tally: metric name, help, and how to read it off the counts.
pub type SegmentTally = (&'static str, &'static str, fn(&SegmentCounts) -> u64);

/// Counters, per OTLP source that reads TCP segment metrics (`source` label): what became
/// of the points.
pub const OTLP_SEGMENT_TALLIES: [SegmentTally; 4] = [
    (
        "faultline_otlp_tcp_segment_points",
        "TCP segment metric points an OTLP receiver took (sent and retransmitted: two per reading)",
        |c| c.points,
    ),
    (
        "faultline_otlp_tcp_segment_points_unpaired",
        "TCP segment metric points whose other half of the reading never came: samples lost to the packet-loss test",
        |c| c.unpaired,
    ),
    (
        "faultline_otlp_tcp_segment_gaps",
        "TCP segment readings more than 3 s after the series' previous one, taken as a new reference instead of a sample",
        |c| c.gaps,
    ),
    (
        "faultline_otlp_tcp_segment_series_forgotten",
        "TCP segment series an OTLP receiver forgot to keep at most 1,024 (least recently read first)",
        |c| c.forgotten,
    ),
];
/// Gauge: OTLP records waiting in the reorder stage.
pub const REORDER_HELD: &str = "faultline_otlp_reorder_held_records";
/// Counter: OTLP records fed behind a newer record of their target.
pub const REORDER_LATE: &str = "faultline_otlp_records_out_of_order";
/// Counter: times the reorder stage's cap fed records before their turn.
pub const REORDER_OVERFLOWS: &str = "faultline_otlp_reorder_overflows";
/// Counter.
pub const GUEST_RESTARTS: &str = "faultline_guest_restarts";
/// Counter: idle discovered targets whose slot went to a new name.
pub const TARGETS_EVICTED: &str = "faultline_targets_evicted";
pub const TARGETS_EVICTED_HELP: &str = "Discovered targets (no [[targets]] configured) that routed no batch for 10 min and gave their slot under analysis.max_targets to a new name; their analysis state and series are dropped";
/// Gauge: targets quarantined now (see `pipeline::quarantine`).
pub const TARGETS_QUARANTINED: &str = "faultline_targets_quarantined";
pub const TARGETS_QUARANTINED_HELP: &str = "Targets quarantined now: their own engine calls trapped the WASM guest 3 times within 10 min, so their batches are dropped (reason quarantined) for 5 min, doubling on repeats up to 1 h, and the other targets keep their analysis state";
/// Counter: quarantines begun.
pub const TARGET_QUARANTINES: &str = "faultline_target_quarantines";
pub const TARGET_QUARANTINES_HELP: &str = "Quarantines of targets begun since start (a target whose own engine calls trapped the WASM guest 3 times within 10 min)";
/// Counter: re-instantiations of the guest that failed (each backs off the next one).
pub const GUEST_RESTART_FAILURES: &str = "faultline_guest_restart_failures";
pub const GUEST_RESTART_FAILURES_HELP: &str = "Times re-instantiating the WASM engine guest after a trap failed; the next attempt waits 1 s, doubling up to 60 s, and meanwhile batches are dropped (reason engine_unavailable)";
/// Counter, by `reason` ([`crate::pipeline::telemetry::TrapReason`]).
pub const GUEST_TRAPS: &str = "faultline_guest_traps";
pub const GUEST_TRAPS_HELP: &str = "WASM traps in engine calls by reason (memory_limit, timeout, fuel, other); each restarts the guest with every target's analysis state lost";
/// Gauge, WASM engine only: 1 while a guest instance runs, 0 while a failed restart
/// backs off (nothing is analysed then).
pub const GUEST_UP: &str = "faultline_guest_up";
pub const GUEST_UP_HELP: &str = "1 while the WASM engine guest runs, 0 while none does (its restart after a trap failed and is retried with a backoff): batches are dropped (reason engine_unavailable) and /healthz answers 503; absent with the native engine";
/// Gauge, WASM engine only: bytes of the guest's linear memory after its latest call.
pub const GUEST_MEMORY: &str = "faultline_guest_memory_bytes";
pub const GUEST_MEMORY_HELP: &str = "Bytes of the WASM engine guest's linear memory after its latest call (it never shrinks while the guest lives); growing past faultline_guest_memory_limit_bytes traps and restarts the guest empty";
/// Gauge, WASM engine only: `[engine] memory_limit_bytes`.
pub const GUEST_MEMORY_LIMIT: &str = "faultline_guest_memory_limit_bytes";
pub const GUEST_MEMORY_LIMIT_HELP: &str =
    "The WASM engine guest's memory limit ([engine] memory_limit_bytes)";
/// Counter, per sink: reports or flushes it failed (exported by the Prometheus sink).
pub const SINK_ERRORS: &str = "faultline_sink_errors";

/// The label of [`THREADS`] that says which count a series is.
pub const THREAD_STATE_LABEL: &str = "state";

/// Longest hint exported as a label value of [`DIAGNOSIS_INFO`]; the full text is in
/// `/report`.
pub const MAX_HINT_CHARS: usize = 256;

/// The [`THREADS`] series of one report: (`state` label value, count). `active` is the
/// report's `active_threads`, τ's denominator: `total` counts every thread with a call in
/// the window, so directly_affected / total is not τ.
pub fn thread_states(t: &ThreadCounts, active: u64) -> [(&'static str, u64); 4] {
    [
        ("total", t.total),
        ("active", active),
        ("affected", t.affected),
        ("directly_affected", t.directly_affected),
    ]
}

/// A report's hint cut to [`MAX_HINT_CHARS`] characters, for a label value.
pub fn hint_label(hint: &str) -> String {
    hint.chars().take(MAX_HINT_CHARS).collect()
}

/// Every symptom, in label order: the `symptom` label's closed set.
pub const SYMPTOMS: [Symptom; 3] = [
    Symptom::BusyLoop,
    Symptom::SyscallLoop,
    Symptom::CacheThrash,
];

// A symptom the engine adds must join [`SYMPTOMS`] (or its threads are never counted):
// this match stops compiling until someone looks.
const _: fn(Symptom) = |s| match s {
    Symptom::BusyLoop | Symptom::SyscallLoop | Symptom::CacheThrash => {}
};

/// The [`VITAL_SIGN`] series of one report: (`sign` label value, value), measured ones only.
pub fn vital_signs(r: &SignRates) -> Vec<(&'static str, f64)> {
    [
        ("cycles_per_ns", r.cycles_per_ns),
        ("ipc", r.ipc),
        ("mpki", r.mpki),
        ("calls_per_mcycle", r.calls_per_mcycle),
        ("switches_per_call", r.switches_per_call),
    ]
    .into_iter()
    // A non-finite ratio cannot come from the engine's integer counters; kept out rather
    // than exported as a sample that breaks `rate()` and alert comparisons.
    .filter_map(|(k, v)| v.filter(|v| v.is_finite()).map(|v| (k, v)))
    .collect()
}

/// The [`SYMPTOM`] series of one report: the target's symptoms, each once, in
/// [`SYMPTOMS`] order.
pub fn target_symptoms(v: &VitalSigns) -> Vec<&'static str> {
    SYMPTOMS
        .into_iter()
        .filter(|s| v.symptoms.contains(s))
        .map(Symptom::as_str)
        .collect()
}

/// The [`SYMPTOM_THREADS`] series of one report: (`symptom`, listed threads showing it),
/// for the symptoms at least one listed thread shows.
pub fn symptom_threads(v: &VitalSigns) -> Vec<(&'static str, Vec<u32>)> {
    SYMPTOMS
        .into_iter()
        .filter_map(|s| {
            let tids: Vec<u32> = v
                .threads
                .iter()
                .filter(|t| t.symptoms.contains(&s))
                .map(|t| t.tid)
                .collect();
            (!tids.is_empty()).then_some((s.as_str(), tids))
        })
        .collect()
}

/// The `faultline_symptom_threads` series of a report: (`symptom` label value, how many
/// listed threads show it), none without vital signs.
pub fn symptom_thread_counts(v: Option<&VitalSigns>) -> Vec<(&'static str, u64)> {
    v.map(|v| {
        symptom_threads(v)
            .into_iter()
            .map(|(s, tids)| (s, tids.len() as u64))
            .collect()
    })
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_states_carry_taus_denominator() {
        let t = ThreadCounts {
            total: 40,
            affected: 12,
            directly_affected: 9,
        };
        // The recording rule faultline_target:threads_directly_affected:ratio divides
        // `directly_affected` by `active`; 9 / 30 is τ, 9 / 40 is not.
        assert_eq!(
            thread_states(&t, 30),
            [
                ("total", 40),
                ("active", 30),
                ("affected", 12),
                ("directly_affected", 9),
            ]
        );
    }
}
