//! TCP segment counters sent as OTLP metrics → the engine's segment records
//! ([`SyscallEvent::tcp_segments`]), so a service fed through OTLP gets the packet-loss
//! test the live perf source gives its targets.
//!
//! A non-blocking server's calls do not slow when its packets are lost; the kernel's count
//! of segments sent (`OutSegs`) and retransmitted (`RetransSegs`) is then the only trace of
//! the fault (see `wasm-guest/src/net_loss.rs`). Agents already export those counters:
//! node_exporter's `node_netstat_Tcp_OutSegs` / `node_netstat_Tcp_RetransSegs` (untyped,
//! so a Collector's `prometheus` receiver forwards them as gauges holding running totals),
//! or any SDK's observable counters (monotonic sums, cumulative or delta). This module
//! turns one reading of both into one record of what was sent and retransmitted since the
//! reading before.
//!
//! The two metrics of a reading must come together: one record is one sample of the
//! engine's test, which counts the samples that retransmitted, so a half alone cannot be
//! a record. Readings are paired by series (every resource and point attribute) and time
//! (within [`PAIR_TOLERANCE_NS`]), in time order within a request. A refused request
//! (engine queue full) leaves the state as it found it, so the client's retry is taken.
//! State is one small entry per series, at most [`MAX_SERIES`] of them.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;

use faultline_engine::SyscallEvent;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value;
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, DataPointFlags, Metric, NumberDataPoint,
};
use serde::{Deserialize, Serialize};

use super::attributes::{Layered, OtlpAttributeNames};
use super::convert::{process_info, Decoded, Grouper};

/// Series whose last reading is kept. A host's agent sends one per monitored process or
/// network namespace; past this the least recently read half is forgotten (counted), so a
/// sender that invents a series per point cannot grow memory.
pub const MAX_SERIES: usize = 1024;

/// How far apart in time the two halves of one reading may be: one scrape or collection
/// stamps both with the same time, and samples are a second apart.
pub const PAIR_TOLERANCE_NS: u64 = 250_000_000;

/// The longest interval one record may cover. The engine's test counts samples and
/// retransmissions a sample, made for one reading a second: a reading after a longer gap
/// (lost readings, a stopped exporter, a scrape too sparse) is a new reference instead.
pub const MAX_READING_GAP_NS: u64 = 3_000_000_000;

/// A reading this far before the reference is no retry but a sender whose clock went back
/// (or a reference stamped far ahead): a new reference, so one bad time cannot silence a
/// series. The engine's own bound on a clock jump.
pub const MAX_CLOCK_STEP_NS: u64 = 3_600 * 1_000_000_000;

/// `[sources.otlp.tcp_segments]`: which metrics carry a network namespace's TCP segments.
/// Defaults are node_exporter's names, the counters most hosts already export.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SegmentMetricNames {
    /// Read the two metrics below (other metric points are counted and left out).
    pub enabled: bool,
    /// Segments sent (`Tcp: OutSegs` of `/proc/net/snmp`), a running total or deltas.
    pub sent: String,
    /// Segments retransmitted (`Tcp: RetransSegs`).
    pub retransmitted: String,
}

impl Default for SegmentMetricNames {
    fn default() -> Self {
        Self {
            enabled: true,
            sent: "node_netstat_Tcp_OutSegs".into(),
            retransmitted: "node_netstat_Tcp_RetransSegs".into(),
        }
    }
}

/// Which of the two counters a point reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Counter {
    Sent,
    Retransmitted,
}

/// One data point of either counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Reading {
    time_ns: u64,
    /// The start of a cumulative series or of a delta's interval (0 for gauges, whose
    /// start time OTLP says to ignore).
    start_ns: u64,
    value: u64,
    /// A delta sum's value counts the interval alone; otherwise it is a running total.
    delta: bool,
}

/// A paired reading kept as the reference for the next one.
#[derive(Clone, Copy, Debug)]
struct Totals {
    time_ns: u64,
    sent: Reading,
    retransmitted: Reading,
}

#[derive(Clone, Debug, Default)]
struct Series {
    /// A reading still waiting for its other half.
    half: Option<(Counter, Reading)>,
    last: Option<Totals>,
    /// When the series was last read (a step counter), for eviction.
    touched: u64,
}

/// What one point did, for the request's tallies.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// The reading completed a pair and made a record (sent, retransmitted since the pair before).
    Record {
        ts_ns: u64,
        sent: u64,
        retransmitted: u64,
    },
    /// Taken: waiting for its other half, the reference for the next pair, or a retry.
    Kept,
    /// Taken as a new reference after a gap longer than [`MAX_READING_GAP_NS`].
    Gap,
    /// The pair mixes a delta and a running total, which cannot be combined.
    Mixed,
}

/// The TCP segment metrics' names and the last readings of every series, shared by both
/// listeners.
#[derive(Debug)]
pub(crate) struct SegmentTracker {
    names: SegmentMetricNames,
    state: Mutex<Tracked>,
}

/// The series state; a request decodes, queues and (when refused) rolls back under one
/// lock, so a client's retry of a refused request finds the state it found before.
#[derive(Debug, Default)]
pub(crate) struct Tracked {
    series: HashMap<u64, Series>,
    hasher: RandomState,
    /// Steps taken (never repeats, so eviction can tell the order of reads apart).
    tick: u64,
    /// The first tick of the request being decoded: its own series are never evicted.
    request_tick: u64,
}

/// What a request changed: each series as it was before (`None`: it did not exist).
#[derive(Debug, Default)]
pub(crate) struct Undo(HashMap<u64, Option<Series>>);

impl SegmentTracker {
    pub fn new(names: SegmentMetricNames) -> Self {
        Self {
            names,
            state: Mutex::new(Tracked::default()),
        }
    }

    /// The series state, held while a request is decoded and queued.
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Tracked> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Instrument names are case-insensitive (OpenTelemetry's API; the Python SDK sends
    /// them lower-cased), so `node_netstat_tcp_outsegs` is node_exporter's counter too.
    fn counter(&self, metric: &str) -> Option<Counter> {
        if !self.names.enabled {
            None
        } else if metric.eq_ignore_ascii_case(&self.names.sent) {
            Some(Counter::Sent)
        } else if metric.eq_ignore_ascii_case(&self.names.retransmitted) {
            Some(Counter::Retransmitted)
        } else {
            None
        }
    }
}

impl Tracked {
    /// The series of a point: every resource attribute (two hosts' exporters under one
    /// service name are two series) and every point attribute.
    fn key(&self, resource: &[KeyValue], point: &[KeyValue]) -> u64 {
        let sorted = |attrs: &[KeyValue]| {
            let mut v: Vec<(String, String)> = attrs
                .iter()
                .map(|kv| (kv.key.clone(), format!("{:?}", kv.value)))
                .collect();
            v.sort_unstable();
            v
        };
        self.hasher.hash_one((sorted(resource), sorted(point)))
    }

    /// Puts back every series a refused request changed.
    pub fn restore(&mut self, undo: Undo) {
        for (key, before) in undo.0 {
            match before {
                Some(s) => self.series.insert(key, s),
                None => self.series.remove(&key),
            };
        }
    }

    /// Forgets the least recently read half of the series read before this request
    /// (amortised: once per `MAX_SERIES / 2` new series). Returns how many were forgotten
    /// and how many of them held a half still waiting for its partner.
    fn make_room(&mut self, undo: &mut Undo) -> (u64, u64) {
        if self.series.len() < MAX_SERIES {
            return (0, 0);
        }
        let mut ticks: Vec<u64> = self.series.values().map(|s| s.touched).collect();
        ticks.sort_unstable();
        let median = ticks.get(ticks.len() / 2).copied().unwrap_or(0);
        let cut = median.min(self.request_tick.saturating_sub(1));
        let (mut forgotten, mut halves) = (0, 0);
        self.series.retain(|k, s| {
            if s.touched > cut {
                return true;
            }
            forgotten += 1;
            halves += u64::from(s.half.is_some());
            undo.0.entry(*k).or_insert_with(|| Some(s.clone()));
            false
        });
        (forgotten, halves)
    }

    fn step(
        &mut self,
        key: u64,
        which: Counter,
        r: Reading,
        undo: &mut Undo,
        g: &mut Grouper,
    ) -> Step {
        if !self.series.contains_key(&key) {
            let (forgotten, halves) = self.make_room(undo);
            g.add_forgotten_segment_series(forgotten);
            g.add_unpaired_segment_points(halves);
        }
        self.tick += 1;
        let tick = self.tick;
        let before = self.series.get(&key).cloned();
        undo.0.entry(key).or_insert(before);
        let s = self.series.entry(key).or_default();
        s.touched = tick;
        match s.half.take() {
            Some((other, h))
                if other != which && h.time_ns.abs_diff(r.time_ns) <= PAIR_TOLERANCE_NS =>
            {
                let (sent, retransmitted) = match which {
                    Counter::Sent => (r, h),
                    Counter::Retransmitted => (h, r),
                };
                pair(s, sent, retransmitted)
            }
            Some((other, h)) if other == which && h == r => {
                // The same half again (a client's retry): still waiting for its partner.
                s.half = Some((which, r));
                Step::Kept
            }
            Some(_) => {
                s.half = Some((which, r));
                g.add_unpaired_segment_points(1);
                Step::Kept
            }
            None => {
                s.half = Some((which, r));
                Step::Kept
            }
        }
    }
}

/// A complete reading: a record of the interval since the reading before, or the reference.
fn pair(s: &mut Series, sent: Reading, retransmitted: Reading) -> Step {
    let time_ns = sent.time_ns.max(retransmitted.time_ns);
    if sent.delta != retransmitted.delta {
        return Step::Mixed;
    }
    let now = Totals {
        time_ns,
        sent,
        retransmitted,
    };
    // The first reading of a series is the reference, deltas too: an SDK's first delta
    // of an observable counter is its whole total (measured: the Python SDK's first
    // point held every segment since boot), which is no interval's count.
    let Some(prev) = s.last else {
        s.last = Some(now);
        return Step::Kept;
    };
    if time_ns <= prev.time_ns {
        // A client's retry of a reading already taken, or one out of order: the reference
        // stays, so the next reading still covers one interval. Unless the sender's clock
        // went back (or the reference was stamped far ahead): then start over from here.
        if prev.time_ns - time_ns > MAX_CLOCK_STEP_NS {
            s.last = Some(now);
        }
        return Step::Kept;
    }
    s.last = Some(now);
    if time_ns - prev.time_ns > MAX_READING_GAP_NS {
        return Step::Gap;
    }
    let contiguous = if sent.delta {
        // A delta must start where the one before ended (SDKs and the Collector's
        // cumulativetodelta stamp it so): else a reading was lost in between, or the
        // sender restarted and its first delta is its whole total again.
        let follows = |a: Reading, b: Reading| a.start_ns == 0 || a.start_ns == b.time_ns;
        prev.sent.delta && follows(sent, prev.sent) && follows(retransmitted, prev.retransmitted)
    } else {
        // A running total that fell, or counts from a new start, restarted (a reboot, a
        // restarted exporter).
        let same_run =
            |a: Reading, b: Reading| !b.delta && a.start_ns == b.start_ns && a.value >= b.value;
        same_run(sent, prev.sent) && same_run(retransmitted, prev.retransmitted)
    };
    if !contiguous {
        return Step::Kept;
    }
    let (sent, retransmitted) = if sent.delta {
        (sent.value, retransmitted.value)
    } else {
        (
            sent.value - prev.sent.value,
            retransmitted.value - prev.retransmitted.value,
        )
    };
    Step::Record {
        ts_ns: time_ns,
        sent,
        retransmitted,
    }
}

/// A point's reading, or why it cannot be one.
fn reading(p: &NumberDataPoint, shape: Shape) -> Result<Option<Reading>, String> {
    if p.flags & DataPointFlags::NoRecordedValueMask as u32 != 0 {
        return Ok(None);
    }
    if p.time_unix_nano == 0 {
        return Err("a TCP segment point without a time".into());
    }
    let value = match p.value {
        Some(Value::AsInt(i)) => u64::try_from(i).ok(),
        Some(Value::AsDouble(d)) if (0.0..1.8e19).contains(&d) => Some(d.round() as u64),
        _ => None,
    };
    let Some(value) = value else {
        return Err(format!(
            "a TCP segment point with no count (value {:?})",
            p.value
        ));
    };
    Ok(Some(Reading {
        time_ns: p.time_unix_nano,
        start_ns: if shape == Shape::Gauge {
            0
        } else {
            p.start_time_unix_nano
        },
        value,
        delta: shape == Shape::Delta,
    }))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Gauge,
    Cumulative,
    Delta,
}

/// The points of a segment metric and their shape; `Err` for shapes that hold no count
/// (histograms, summaries), a sum that is not monotonic or of no stated temporality.
fn points(m: &Metric) -> Result<(&[NumberDataPoint], Shape), String> {
    match &m.data {
        Some(Data::Gauge(g)) => Ok((&g.data_points, Shape::Gauge)),
        Some(Data::Sum(s)) if !s.is_monotonic => Err(format!(
            "metric {:?} is a non-monotonic sum, not a counter",
            m.name
        )),
        Some(Data::Sum(s)) if s.aggregation_temporality == AggregationTemporality::Delta as i32 => {
            Ok((&s.data_points, Shape::Delta))
        }
        Some(Data::Sum(s))
            if s.aggregation_temporality == AggregationTemporality::Cumulative as i32 =>
        {
            Ok((&s.data_points, Shape::Cumulative))
        }
        Some(Data::Sum(_)) => Err(format!(
            "metric {:?} is a sum of unspecified temporality",
            m.name
        )),
        _ => Err(format!("metric {:?} is not a gauge or sum", m.name)),
    }
}

/// One segment point of a request, before it is fed in time order.
struct Pending<'a> {
    key: u64,
    which: Counter,
    reading: Reading,
    point: &'a NumberDataPoint,
    resource: &'a [KeyValue],
}

/// Metric requests: the segment counters become records; every other point is counted
/// and left out (per-interval values cannot be attached to calls). `state` is the
/// tracker's, locked by the caller for the request's whole decode and delivery; the
/// returned [`Undo`] puts it back when the request is refused.
pub(crate) fn metrics(
    source: &'static str,
    names: &OtlpAttributeNames,
    tracker: &SegmentTracker,
    state: &mut Tracked,
    req: &ExportMetricsServiceRequest,
) -> (Decoded, Undo) {
    let mut g = Grouper::new(source);
    let mut pending = Vec::new();
    for rm in &req.resource_metrics {
        let res = rm
            .resource
            .as_ref()
            .map(|r| r.attributes.as_slice())
            .unwrap_or(&[]);
        for m in rm.scope_metrics.iter().flat_map(|s| s.metrics.iter()) {
            let Some(which) = tracker.counter(&m.name) else {
                g.add_unused_metric_points(point_count(m) as u64);
                continue;
            };
            let (pts, shape) = match points(m) {
                Ok(p) => p,
                Err(why) => {
                    for _ in 0..point_count(m) {
                        g.reject(|| why.clone());
                    }
                    continue;
                }
            };
            for p in pts {
                match reading(p, shape) {
                    Ok(Some(reading)) => pending.push(Pending {
                        key: state.key(res, &p.attributes),
                        which,
                        reading,
                        point: p,
                        resource: res,
                    }),
                    Ok(None) => g.add_unused_metric_points(1),
                    Err(why) => g.reject(|| why),
                }
            }
        }
    }
    // In time order, so readings of several times in one request pair whatever order the
    // sender listed them in.
    pending.sort_by_key(|p| (p.reading.time_ns, p.key, p.which));
    let mut undo = Undo::default();
    state.request_tick = state.tick + 1;
    for p in pending {
        let step = state.step(p.key, p.which, p.reading, &mut undo, &mut g);
        match step {
            Step::Record {
                ts_ns,
                sent,
                retransmitted,
            } => {
                let attrs = Layered {
                    first: p.point.attributes.as_slice(),
                    then: p.resource,
                };
                let process = process_info(names, &attrs);
                let pid = process.pid.unwrap_or(0);
                g.add_event(
                    &process,
                    SyscallEvent::tcp_segments(pid, ts_ns, sent, retransmitted),
                );
                g.add_segment_points(1);
            }
            Step::Kept => g.add_segment_points(1),
            Step::Gap => {
                g.add_segment_points(1);
                g.add_segment_gaps(1);
            }
            Step::Mixed => {
                g.reject(|| "TCP segment metrics mix a delta and a running total".to_string());
            }
        }
    }
    (g.finish(), undo)
}

fn point_count(m: &Metric) -> usize {
    match &m.data {
        Some(Data::Gauge(d)) => d.data_points.len(),
        Some(Data::Sum(d)) => d.data_points.len(),
        Some(Data::Histogram(d)) => d.data_points.len(),
        Some(Data::ExponentialHistogram(d)) => d.data_points.len(),
        Some(Data::Summary(d)) => d.data_points.len(),
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faultline_engine::EventKind;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue};
    use opentelemetry_proto::tonic::metrics::v1::{
        Gauge, Histogram, HistogramDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;

    const S: u64 = 1_000_000_000;
    const SENT: &str = "node_netstat_Tcp_OutSegs";
    const RETR: &str = "node_netstat_Tcp_RetransSegs";

    fn kv(key: &str, v: any_value::Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(v) }),
            ..Default::default()
        }
    }

    fn point(t: u64, start: u64, v: Value) -> NumberDataPoint {
        NumberDataPoint {
            time_unix_nano: t,
            start_time_unix_nano: start,
            value: Some(v),
            ..Default::default()
        }
    }

    fn gauge(name: &str, points: Vec<NumberDataPoint>) -> Metric {
        Metric {
            name: name.into(),
            data: Some(Data::Gauge(Gauge {
                data_points: points,
            })),
            ..Default::default()
        }
    }

    fn sum(name: &str, delta: bool, monotonic: bool, points: Vec<NumberDataPoint>) -> Metric {
        let temporality = if delta {
            AggregationTemporality::Delta
        } else {
            AggregationTemporality::Cumulative
        };
        Metric {
            name: name.into(),
            data: Some(Data::Sum(Sum {
                data_points: points,
                aggregation_temporality: temporality as i32,
                is_monotonic: monotonic,
            })),
            ..Default::default()
        }
    }

    fn request(service: &str, metrics: Vec<Metric>) -> ExportMetricsServiceRequest {
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(Resource {
                    attributes: vec![
                        kv(
                            "service.name",
                            any_value::Value::StringValue(service.into()),
                        ),
                        kv("process.pid", any_value::Value::IntValue(31)),
                    ],
                    ..Default::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    metrics,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    /// node_exporter through a Collector: both counters as gauges of running totals.
    fn scrape(t: u64, sent: f64, retr: f64) -> ExportMetricsServiceRequest {
        request(
            "nginx",
            vec![
                gauge(SENT, vec![point(t, 0, Value::AsDouble(sent))]),
                gauge(RETR, vec![point(t, 0, Value::AsDouble(retr))]),
            ],
        )
    }

    fn decode(tr: &SegmentTracker, req: &ExportMetricsServiceRequest) -> Decoded {
        let mut state = tr.lock();
        metrics(
            "otlp_http",
            &OtlpAttributeNames::default(),
            tr,
            &mut state,
            req,
        )
        .0
    }

    fn records(d: &Decoded) -> Vec<(u64, u64, u64)> {
        d.batches
            .iter()
            .flat_map(|b| b.events.iter())
            .map(|e| {
                assert_eq!(e.kind, EventKind::TcpSegments);
                let (s, r) = e.segments().expect("segments");
                (e.ts_ns, s, r)
            })
            .collect()
    }

    fn tracker() -> SegmentTracker {
        SegmentTracker::new(SegmentMetricNames::default())
    }

    #[test]
    fn running_totals_become_per_interval_records_of_the_process() {
        let tr = tracker();
        let first = decode(&tr, &scrape(10 * S, 1_000.0, 3.0));
        assert!(
            records(&first).is_empty(),
            "the first reading is the reference"
        );
        assert_eq!(first.segment_points, 2);
        let d = decode(&tr, &scrape(11 * S, 1_400.0, 9.0));
        assert_eq!(records(&d), vec![(11 * S, 400, 6)]);
        let b = &d.batches[0];
        assert_eq!(b.process.service_name.as_deref(), Some("nginx"));
        assert_eq!(b.process.pid, Some(31));
        assert!(b.events.iter().all(|e| e.pid == 31));
        assert_eq!((d.events, d.rejected, d.unused_metric_points), (1, 0, 0));
        let d = decode(&tr, &scrape(12 * S, 1_500.0, 9.0));
        assert_eq!(records(&d), vec![(12 * S, 100, 0)]);
    }

    #[test]
    fn a_retry_a_late_reading_and_a_restart_make_no_record() {
        let tr = tracker();
        decode(&tr, &scrape(10 * S, 1_000.0, 3.0));
        assert_eq!(
            records(&decode(&tr, &scrape(11 * S, 1_100.0, 4.0))).len(),
            1
        );
        // The same export again (a client's retry), then one from before it.
        assert!(records(&decode(&tr, &scrape(11 * S, 1_100.0, 4.0))).is_empty());
        assert!(records(&decode(&tr, &scrape(9 * S, 900.0, 1.0))).is_empty());
        // The reference stayed at 11 s: the next reading covers one interval.
        assert_eq!(
            records(&decode(&tr, &scrape(12 * S, 1_150.0, 4.0))),
            vec![(12 * S, 50, 0)]
        );
        // A reboot: totals fall, a new reference, then records again.
        assert!(records(&decode(&tr, &scrape(13 * S, 10.0, 0.0))).is_empty());
        assert_eq!(
            records(&decode(&tr, &scrape(14 * S, 30.0, 2.0))),
            vec![(14 * S, 20, 2)]
        );
    }

    /// Both counters as monotonic sums (deltas or running totals) of one reading.
    fn sums(delta: bool, t: u64, start: u64, s: i64, r: i64) -> ExportMetricsServiceRequest {
        request(
            "db",
            vec![
                sum(SENT, delta, true, vec![point(t, start, Value::AsInt(s))]),
                sum(RETR, delta, true, vec![point(t, start, Value::AsInt(r))]),
            ],
        )
    }

    #[test]
    fn a_new_start_time_is_a_restart_of_a_cumulative_sum() {
        let tr = tracker();
        let req = |t: u64, start: u64, s: i64, r: i64| sums(false, t, start, s, r);
        decode(&tr, &req(10 * S, S, 500, 0));
        assert_eq!(
            records(&decode(&tr, &req(11 * S, S, 800, 2))),
            vec![(11 * S, 300, 2)]
        );
        // Higher totals, but counted from a new start: not a difference of one run.
        assert!(records(&decode(&tr, &req(12 * S, 11 * S, 900, 5))).is_empty());
        assert_eq!(
            records(&decode(&tr, &req(13 * S, 11 * S, 950, 5))),
            vec![(13 * S, 50, 0)]
        );
    }

    #[test]
    fn delta_sums_after_the_first_are_records_as_they_come() {
        let tr = tracker();
        let req = |t: u64, s: i64, r: i64| sums(true, t, t - S, s, r);
        // An SDK's first delta of an observable counter is its whole total.
        assert!(records(&decode(&tr, &req(5 * S, 6_000_000, 13_000))).is_empty());
        assert_eq!(
            records(&decode(&tr, &req(6 * S, 70, 7))),
            vec![(6 * S, 70, 7)]
        );
        // A retried export is taken once.
        assert!(records(&decode(&tr, &req(6 * S, 70, 7))).is_empty());
        assert_eq!(
            records(&decode(&tr, &req(7 * S, 50, 0))),
            vec![(7 * S, 50, 0)]
        );
    }

    #[test]
    fn halves_pair_across_requests_within_the_tolerance_only() {
        let tr = tracker();
        let half = |name: &str, t: u64, v: f64| {
            request(
                "nginx",
                vec![gauge(name, vec![point(t, 0, Value::AsDouble(v))])],
            )
        };
        decode(&tr, &scrape(10 * S, 100.0, 0.0));
        // Sent at 11 s, retransmitted 0.2 s later in another request: one reading.
        assert!(records(&decode(&tr, &half(SENT, 11 * S, 200.0))).is_empty());
        let d = decode(&tr, &half(RETR, 11 * S + 200_000_000, 1.0));
        assert_eq!(records(&d), vec![(11 * S + 200_000_000, 100, 1)]);
        // A sent half at 12 s whose partner never comes; the next sent half replaces it.
        decode(&tr, &half(SENT, 12 * S, 300.0));
        let d = decode(&tr, &half(SENT, 13 * S, 400.0));
        assert_eq!(d.unpaired_segment_points, 1);
        // A retransmitted half 0.5 s away is no partner either.
        let d = decode(&tr, &half(RETR, 13 * S + 500_000_000, 2.0));
        assert_eq!((d.unpaired_segment_points, records(&d).len()), (1, 0));
    }

    #[test]
    fn series_are_told_apart_by_process_and_point_attributes() {
        let tr = tracker();
        let two = |t: u64, a: f64, b: f64| {
            let mut pa = point(t, 0, Value::AsDouble(a));
            pa.attributes = vec![kv("netns", any_value::Value::StringValue("a".into()))];
            let mut pb = point(t, 0, Value::AsDouble(b));
            pb.attributes = vec![kv("netns", any_value::Value::StringValue("b".into()))];
            let mut ra = point(t, 0, Value::AsDouble(0.0));
            ra.attributes = pa.attributes.clone();
            let mut rb = point(t, 0, Value::AsDouble(0.0));
            rb.attributes = pb.attributes.clone();
            request(
                "db",
                vec![gauge(SENT, vec![pa, pb]), gauge(RETR, vec![ra, rb])],
            )
        };
        decode(&tr, &two(10 * S, 100.0, 5_000.0));
        let mut got = records(&decode(&tr, &two(11 * S, 150.0, 5_010.0)));
        got.sort();
        assert_eq!(got, vec![(11 * S, 10, 0), (11 * S, 50, 0)]);
        // Another service's counters (here a complete reading while db's series holds a
        // reference) are another series: never differenced against db's.
        let web = |t: u64, v: f64| {
            request(
                "web",
                vec![
                    gauge(SENT, vec![point(t, 0, Value::AsDouble(v))]),
                    gauge(RETR, vec![point(t, 0, Value::AsDouble(0.0))]),
                ],
            )
        };
        assert!(records(&decode(&tr, &web(12 * S, 1_000_000.0))).is_empty());
        let d = decode(&tr, &web(13 * S, 1_000_007.0));
        assert_eq!(records(&d), vec![(13 * S, 7, 0)]);
        assert_eq!(d.batches[0].process.service_name.as_deref(), Some("web"));
        // Two hosts' exporters under one service name differ in a resource attribute.
        let host = |h: &str, t: u64, v: f64| {
            let mut r = web(t, v);
            if let Some(res) = r.resource_metrics[0].resource.as_mut() {
                res.attributes.push(kv(
                    "service.instance.id",
                    any_value::Value::StringValue(h.into()),
                ));
            }
            r
        };
        decode(&tr, &host("a", 14 * S, 5.0));
        decode(&tr, &host("b", 14 * S, 9_000.0));
        assert_eq!(
            records(&decode(&tr, &host("a", 15 * S, 8.0))),
            vec![(15 * S, 3, 0)]
        );
        assert_eq!(
            records(&decode(&tr, &host("b", 15 * S, 9_004.0))),
            vec![(15 * S, 4, 0)]
        );
    }

    #[test]
    fn readings_of_several_times_in_one_request_pair_in_time_order() {
        let tr = tracker();
        decode(&tr, &scrape(10 * S, 100.0, 0.0));
        let pts = |a: f64, b: f64| {
            vec![
                point(11 * S, 0, Value::AsDouble(a)),
                point(12 * S, 0, Value::AsDouble(b)),
            ]
        };
        // All sent points first, then all retransmitted ones, the later time listed first.
        let mut retr = pts(1.0, 3.0);
        retr.reverse();
        let d = decode(
            &tr,
            &request(
                "nginx",
                vec![gauge(SENT, pts(150.0, 170.0)), gauge(RETR, retr)],
            ),
        );
        assert_eq!(records(&d), vec![(11 * S, 50, 1), (12 * S, 20, 2)]);
        assert_eq!(d.unpaired_segment_points, 0);
    }

    #[test]
    fn a_refused_request_is_rolled_back_so_its_retry_counts() {
        let tr = tracker();
        decode(&tr, &scrape(10 * S, 100.0, 0.0));
        let names = OtlpAttributeNames::default();
        let req = scrape(11 * S, 130.0, 2.0);
        {
            let mut state = tr.lock();
            let (d, undo) = metrics("otlp_http", &names, &tr, &mut state, &req);
            assert_eq!(records(&d), vec![(11 * S, 30, 2)]);
            // The queue refused it: put the series back as it was.
            state.restore(undo);
        }
        assert_eq!(records(&decode(&tr, &req)), vec![(11 * S, 30, 2)]);
        // Without the rollback a retry is only a duplicate.
        assert!(records(&decode(&tr, &req)).is_empty());
        // A new series a refused request made is gone again.
        let other = request(
            "web",
            vec![gauge(SENT, vec![point(S, 0, Value::AsDouble(1.0))])],
        );
        let mut state = tr.lock();
        let before = state.series.len();
        let (_, undo) = metrics("otlp_http", &names, &tr, &mut state, &other);
        assert_eq!(state.series.len(), before + 1);
        state.restore(undo);
        assert_eq!(state.series.len(), before);
    }

    #[test]
    fn a_gap_a_clock_step_back_and_a_gauge_start_time_are_handled() {
        let tr = tracker();
        decode(&tr, &scrape(10 * S, 100.0, 0.0));
        // 5 s later: too long for one sample; a new reference, counted.
        let d = decode(&tr, &scrape(15 * S, 200.0, 9.0));
        assert_eq!((records(&d).len(), d.segment_gaps), (0, 1));
        assert_eq!(
            records(&decode(&tr, &scrape(16 * S, 210.0, 9.0))),
            vec![(16 * S, 10, 0)]
        );
        // One reading stamped three hours ahead, then the sender's own clock again: the
        // series starts over there instead of taking every later reading for a retry.
        decode(&tr, &scrape(16 * S + 3 * 3_600 * S, 300.0, 9.0));
        assert!(records(&decode(&tr, &scrape(17 * S, 310.0, 9.0))).is_empty());
        assert_eq!(
            records(&decode(&tr, &scrape(18 * S, 320.0, 9.0))),
            vec![(18 * S, 10, 0)]
        );
        // A gauge's start time is ignored (OTLP says so), even when it changes every time.
        let tr = tracker();
        let g = |t: u64, v: f64| {
            request(
                "db",
                vec![
                    gauge(SENT, vec![point(t, t - S, Value::AsDouble(v))]),
                    gauge(RETR, vec![point(t, t - S, Value::AsDouble(0.0))]),
                ],
            )
        };
        decode(&tr, &g(2 * S, 10.0));
        assert_eq!(records(&decode(&tr, &g(3 * S, 15.0))), vec![(3 * S, 5, 0)]);
    }

    #[test]
    fn a_delta_that_does_not_follow_the_one_before_is_a_new_reference() {
        let tr = tracker();
        let req = |start: u64, t: u64, s: i64| sums(true, t, start, s, 0);
        decode(&tr, &req(S, 2 * S, 1_000));
        assert_eq!(
            records(&decode(&tr, &req(2 * S, 3 * S, 40))),
            vec![(3 * S, 40, 0)]
        );
        // The sender restarted: its first delta since its new start is its whole total.
        assert!(records(&decode(&tr, &req(3_500_000_000, 4 * S, 6_000_000))).is_empty());
        assert_eq!(
            records(&decode(&tr, &req(4 * S, 5 * S, 30))),
            vec![(5 * S, 30, 0)]
        );
    }

    #[test]
    fn one_request_of_more_series_than_the_cap_keeps_its_own() {
        let tr = tracker();
        let n = MAX_SERIES + 200;
        let many = |t: u64| {
            let resource_metrics = (0..n)
                .map(|i| {
                    let mut r = scrape(t, 1_000.0 + (t / S) as f64, 0.0);
                    if let Some(res) = r.resource_metrics[0].resource.as_mut() {
                        res.attributes[1] = kv("process.pid", any_value::Value::IntValue(i as i64));
                    }
                    r.resource_metrics.remove(0)
                })
                .collect();
            ExportMetricsServiceRequest { resource_metrics }
        };
        let d = decode(&tr, &many(S));
        assert_eq!(d.unpaired_segment_points, 0);
        let d = decode(&tr, &many(2 * S));
        assert_eq!((records(&d).len(), d.unpaired_segment_points), (n, 0));
    }

    #[test]
    fn bad_points_are_rejected_and_other_metrics_counted() {
        let tr = tracker();
        let req = request(
            "db",
            vec![
                gauge(SENT, vec![point(S, 0, Value::AsDouble(-1.0))]),
                gauge(SENT, vec![point(S, 0, Value::AsDouble(f64::NAN))]),
                gauge(RETR, vec![point(0, 0, Value::AsInt(1))]),
                sum(SENT, false, false, vec![point(S, 0, Value::AsInt(1))]),
                Metric {
                    name: RETR.into(),
                    data: Some(Data::Histogram(Histogram {
                        data_points: vec![HistogramDataPoint::default()],
                        ..Histogram::default()
                    })),
                    ..Default::default()
                },
                gauge("node_load1", vec![point(S, 0, Value::AsDouble(0.5)); 3]),
            ],
        );
        let d = decode(&tr, &req);
        assert_eq!(d.rejected, 5);
        assert_eq!(d.unused_metric_points, 3);
        assert_eq!(d.segment_points, 0);
        assert!(d
            .error_message()
            .starts_with("5 records rejected; first: a TCP segment point with no count"));
        // A delta sent with a running total of retransmissions cannot be combined.
        let d = decode(
            &tr,
            &request(
                "db",
                vec![
                    sum(SENT, true, true, vec![point(2 * S, S, Value::AsInt(9))]),
                    gauge(RETR, vec![point(2 * S, 0, Value::AsInt(1))]),
                ],
            ),
        );
        assert_eq!((d.rejected, records(&d).len()), (1, 0));
        // A point flagged as holding no value is no reading.
        let mut empty = point(3 * S, 0, Value::AsInt(0));
        empty.flags = DataPointFlags::NoRecordedValueMask as u32;
        let d = decode(&tr, &request("db", vec![gauge(SENT, vec![empty])]));
        assert_eq!(
            (d.rejected, d.unused_metric_points, d.segment_points),
            (0, 1, 0)
        );
    }

    #[test]
    fn disabled_or_renamed_metrics_are_left_out() {
        let tr = SegmentTracker::new(SegmentMetricNames {
            enabled: false,
            ..SegmentMetricNames::default()
        });
        let d = decode(&tr, &scrape(S, 1.0, 0.0));
        assert_eq!((d.unused_metric_points, d.segment_points), (2, 0));
        let tr = SegmentTracker::new(SegmentMetricNames {
            enabled: true,
            sent: "tcp.segments.sent".into(),
            retransmitted: "tcp.segments.retransmitted".into(),
        });
        let d = decode(&tr, &scrape(S, 1.0, 0.0));
        assert_eq!(d.unused_metric_points, 2);
        let lower = |t: u64, s: f64| {
            request(
                "db",
                vec![
                    gauge(&SENT.to_lowercase(), vec![point(t, 0, Value::AsDouble(s))]),
                    gauge(
                        &RETR.to_lowercase(),
                        vec![point(t, 0, Value::AsDouble(0.0))],
                    ),
                ],
            )
        };
        let default = tracker();
        decode(&default, &lower(S, 5.0));
        assert_eq!(
            records(&decode(&default, &lower(2 * S, 8.0))),
            vec![(2 * S, 3, 0)]
        );
        let req = |t: u64, s: i64, r: i64| {
            request(
                "db",
                vec![
                    gauge("tcp.segments.sent", vec![point(t, 0, Value::AsInt(s))]),
                    gauge(
                        "tcp.segments.retransmitted",
                        vec![point(t, 0, Value::AsInt(r))],
                    ),
                ],
            )
        };
        decode(&tr, &req(S, 10, 0));
        assert_eq!(
            records(&decode(&tr, &req(2 * S, 25, 1))),
            vec![(2 * S, 15, 1)]
        );
    }

    #[test]
    fn series_memory_is_bounded_and_recent_series_survive() {
        let tr = tracker();
        let own = |pid: i64, t: u64, v: f64| {
            let mut r = scrape(t, v, 0.0);
            if let Some(res) = r.resource_metrics[0].resource.as_mut() {
                res.attributes[1] = kv("process.pid", any_value::Value::IntValue(pid));
            }
            r
        };
        decode(&tr, &own(1, S, 100.0));
        let mut forgotten = 0;
        for i in 0..3 * MAX_SERIES as i64 {
            forgotten += decode(&tr, &own(1_000 + i, S, 1.0)).forgotten_segment_series;
            // The busy series is read between the others and stays.
            if i % 100 == 0 {
                decode(&tr, &own(1, S + 1 + i as u64, 100.0 + i as f64));
            }
        }
        let len = tr.state.lock().unwrap().series.len();
        assert!(len <= MAX_SERIES, "{len} series kept");
        assert!(forgotten >= 2 * MAX_SERIES as u64, "{forgotten} forgotten");
        let d = decode(&tr, &own(1, 2 * S, 10_000.0));
        assert_eq!(records(&d).len(), 1, "the busy series kept its reference");
    }
}
