//! Whole OTLP export requests → per-process [`EventBatch`]es plus the tallies the receiver
//! reports back (partial success) and counts (telemetry).

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};

use faultline_engine::SyscallEvent;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::attributes::{AttrValue, Attrs, Layered, OtlpAttributeNames};
use super::record::{map_record, Mapped, RecordTime};
use crate::model::{EventBatch, ProcessInfo};
use crate::sources::MAX_BATCH_EVENTS;

/// The result of decoding one request.
#[derive(Debug, Default)]
pub(crate) struct Decoded {
    pub batches: Vec<EventBatch>,
    /// Syscall events decoded (the sum over `batches`).
    pub events: u64,
    /// Syscall records that could not be used (partial success, decode errors).
    pub rejected: u64,
    /// Records that are not syscall telemetry (dropped, counted).
    pub not_syscall: u64,
    /// Metric data points received that faultline does not use (see docs/otlp-mapping.md).
    pub unused_metric_points: u64,
    /// TCP segment metric points taken (see `segment_metrics`).
    pub segment_points: u64,
    /// Of those, halves of a reading whose other half never came (lost).
    pub unpaired_segment_points: u64,
    /// Segment series forgotten to make room for new ones.
    pub forgotten_segment_series: u64,
    /// Segment readings taken as a new reference after a gap too long for one record.
    pub segment_gaps: u64,
    /// The first rejection, for `partial_success.error_message`.
    pub first_error: Option<String>,
}

impl Decoded {
    fn reject(&mut self, why: impl FnOnce() -> String) {
        self.rejected += 1;
        if self.first_error.is_none() {
            self.first_error = Some(why());
        }
    }

    /// `partial_success.error_message`: the first reason plus how many records it stands for.
    pub fn error_message(&self) -> String {
        match &self.first_error {
            Some(e) if self.rejected > 1 => {
                format!("{} records rejected; first: {e}", self.rejected)
            }
            Some(e) => format!("1 record rejected: {e}"),
            None => String::new(),
        }
    }
}

/// Collects events per process, cutting batches at [`MAX_BATCH_EVENTS`].
///
/// Groups are found through a hash index, so a request of many processes costs time in
/// proportion to its records, not records × processes; `open` keeps first-seen order,
/// which is the order of the batches.
pub(crate) struct Grouper {
    source: &'static str,
    open: Vec<(ProcessInfo, Vec<SyscallEvent>)>,
    /// Indexes into `open` by the hash of a group's key (see [`group_key_hash`]); a
    /// hash shared by several keys lists all their groups.
    index: HashMap<u64, Vec<usize>>,
    hasher: RandomState,
    /// The group of the previous record: requests mostly carry one process.
    last: Option<usize>,
    /// Key comparisons made, to test that lookups stay cheap.
    #[cfg(test)]
    compared: u64,
    out: Decoded,
    /// Records still expected from the current resource: the next new group reserves
    /// room for them once (saving the doubling copies), and never more than a batch.
    reserve_hint: usize,
}

impl Grouper {
    pub fn new(source: &'static str) -> Self {
        Self {
            source,
            open: Vec::new(),
            index: HashMap::new(),
            hasher: RandomState::new(),
            last: None,
            #[cfg(test)]
            compared: 0,
            out: Decoded::default(),
            reserve_hint: 0,
        }
    }

    /// Announces how many records the next resource carries (capacity hint only).
    pub fn expect_records(&mut self, n: usize) {
        self.reserve_hint = n.min(MAX_BATCH_EVENTS);
    }

    /// Routes one mapped record; `process` is the record's process (event pid wins over it).
    pub fn add(&mut self, process: &ProcessInfo, mapped: Mapped) {
        match mapped {
            Mapped::Event(ev) => self.push(process, ev),
            Mapped::NotSyscall => self.out.not_syscall += 1,
            Mapped::Rejected(r) => self.out.reject(|| r.to_string()),
        }
    }

    /// Counts a record rejected before mapping (e.g. a flat JSON line that is no object).
    pub fn reject(&mut self, why: impl FnOnce() -> String) {
        self.out.reject(why);
    }

    pub fn add_unused_metric_points(&mut self, n: u64) {
        self.out.unused_metric_points += n;
    }

    pub fn add_segment_points(&mut self, n: u64) {
        self.out.segment_points += n;
    }

    pub fn add_unpaired_segment_points(&mut self, n: u64) {
        self.out.unpaired_segment_points += n;
    }

    pub fn add_forgotten_segment_series(&mut self, n: u64) {
        self.out.forgotten_segment_series += n;
    }

    pub fn add_segment_gaps(&mut self, n: u64) {
        self.out.segment_gaps += n;
    }

    /// Routes an event made from something other than one record (a metric reading).
    pub fn add_event(&mut self, process: &ProcessInfo, ev: SyscallEvent) {
        self.push(process, ev);
    }

    fn push(&mut self, process: &ProcessInfo, ev: SyscallEvent) {
        let pid = (ev.pid != 0).then_some(ev.pid).or(process.pid);
        let idx = match self.find(pid, process) {
            Some(i) => i,
            None => {
                let mut p = process.clone();
                p.pid = pid;
                // Consumed by the first group, so reservations never exceed the records.
                let reserve = std::mem::take(&mut self.reserve_hint);
                self.open.push((p, Vec::with_capacity(reserve)));
                let i = self.open.len() - 1;
                let hash = group_key_hash(&self.hasher, pid, process);
                self.index.entry(hash).or_default().push(i);
                i
            }
        };
        self.last = Some(idx);
        let Some((p, events)) = self.open.get_mut(idx) else {
            return;
        };
        events.push(ev);
        self.out.events += 1;
        if events.len() >= MAX_BATCH_EVENTS {
            let batch = EventBatch {
                source: self.source,
                process: p.clone(),
                events: std::mem::take(events),
            };
            self.out.batches.push(batch);
        }
    }

    /// The open group of `process` with `pid`, if any.
    fn find(&mut self, pid: Option<u32>, process: &ProcessInfo) -> Option<usize> {
        let same = |p: &ProcessInfo| {
            p.pid == pid
                && p.service_name == process.service_name
                && p.comm == process.comm
                && p.host == process.host
        };
        if let Some(i) = self.last {
            #[cfg(test)]
            {
                self.compared += 1;
            }
            if self.open.get(i).is_some_and(|(p, _)| same(p)) {
                return Some(i);
            }
        }
        let hash = group_key_hash(&self.hasher, pid, process);
        let candidates = self.index.get(&hash)?;
        #[cfg(test)]
        {
            self.compared += candidates.len() as u64;
        }
        candidates
            .iter()
            .copied()
            .find(|&i| self.open.get(i).is_some_and(|(p, _)| same(p)))
    }

    pub fn finish(mut self) -> Decoded {
        for (process, events) in self.open.drain(..) {
            if !events.is_empty() {
                self.out.batches.push(EventBatch {
                    source: self.source,
                    process,
                    events,
                });
            }
        }
        self.out
    }
}

/// The hash of a group's key: the fields [`Grouper`] tells processes apart by.
fn group_key_hash(hasher: &RandomState, pid: Option<u32>, p: &ProcessInfo) -> u64 {
    hasher.hash_one((
        pid,
        p.service_name.as_deref(),
        p.comm.as_deref(),
        p.host.as_deref(),
    ))
}

/// The process a set of (resource or flat record) attributes describes.
pub(crate) fn process_info<A: Attrs + ?Sized>(
    names: &OtlpAttributeNames,
    attrs: &A,
) -> ProcessInfo {
    let s = |key: &str| attrs.get(key).and_then(|v| v.as_str().map(str::to_string));
    ProcessInfo {
        pid: attrs
            .get(&names.process_pid)
            .and_then(AttrValue::as_u64)
            .and_then(|p| u32::try_from(p).ok()),
        comm: s(&names.process_executable_name),
        service_name: s(&names.service_name),
        host: s(&names.host_name),
        cgroup: None,
    }
}

/// The process of one record: its resource's, unless the record sets a process-level
/// attribute itself (`service.name`, `host.name`, `process.executable.name`), which wins
/// over the resource's (docs/otlp-mapping.md): a Collector transform may put them on
/// each record, and routing by `service_names` needs them. The record's pid already
/// wins in [`map_record`].
pub(crate) fn record_process<'p, R, A>(
    names: &OtlpAttributeNames,
    record: &R,
    layered: &A,
    resource: &'p ProcessInfo,
) -> Cow<'p, ProcessInfo>
where
    R: Attrs + ?Sized,
    A: Attrs + ?Sized,
{
    let own = [
        &names.service_name,
        &names.host_name,
        &names.process_executable_name,
    ]
    .into_iter()
    .any(|k| record.get(k).is_some());
    if own {
        Cow::Owned(process_info(names, layered))
    } else {
        Cow::Borrowed(resource)
    }
}

fn resource_attrs(r: &Option<Resource>) -> &[KeyValue] {
    r.as_ref().map(|r| r.attributes.as_slice()).unwrap_or(&[])
}

/// Log records: one record = one syscall (or one half of it, with a phase attribute).
pub(crate) fn logs(
    source: &'static str,
    names: &OtlpAttributeNames,
    req: &ExportLogsServiceRequest,
) -> Decoded {
    let mut g = Grouper::new(source);
    for rl in &req.resource_logs {
        let res = resource_attrs(&rl.resource);
        let process = process_info(names, res);
        g.expect_records(rl.scope_logs.iter().map(|s| s.log_records.len()).sum());
        for rec in rl.scope_logs.iter().flat_map(|s| s.log_records.iter()) {
            let attrs = Layered {
                first: rec.attributes.as_slice(),
                then: res,
            };
            let t = if rec.time_unix_nano != 0 {
                rec.time_unix_nano
            } else {
                rec.observed_time_unix_nano
            };
            let own = record_process(names, rec.attributes.as_slice(), &attrs, &process);
            g.add(
                &own,
                map_record(names, &attrs, RecordTime::Instant(t), None),
            );
        }
    }
    g.finish()
}

/// Spans: one span = one whole call from its start to its end.
pub(crate) fn traces(
    source: &'static str,
    names: &OtlpAttributeNames,
    req: &ExportTraceServiceRequest,
) -> Decoded {
    let mut g = Grouper::new(source);
    for rs in &req.resource_spans {
        let res = resource_attrs(&rs.resource);
        let process = process_info(names, res);
        g.expect_records(rs.scope_spans.iter().map(|s| s.spans.len()).sum());
        for span in rs.scope_spans.iter().flat_map(|s| s.spans.iter()) {
            let attrs = Layered {
                first: span.attributes.as_slice(),
                then: res,
            };
            let t = RecordTime::Span {
                start_ns: span.start_time_unix_nano,
                end_ns: span.end_time_unix_nano,
            };
            let own = record_process(names, span.attributes.as_slice(), &attrs, &process);
            g.add(&own, map_record(names, &attrs, t, Some(&span.name)));
        }
    }
    g.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue};
    use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};

    fn kv(key: &str, v: Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(v) }),
            ..Default::default()
        }
    }

    fn request(n: usize) -> ExportLogsServiceRequest {
        let rec = |i: usize| LogRecord {
            time_unix_nano: 1_000 + i as u64,
            attributes: vec![
                kv("syscall.name", Value::StringValue("read".into())),
                kv("thread.id", Value::IntValue(10 + (i % 3) as i64)),
                kv("syscall.duration_ns", Value::IntValue(5)),
            ],
            ..Default::default()
        };
        ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: Some(Resource {
                    attributes: vec![
                        kv("service.name", Value::StringValue("db".into())),
                        kv("process.pid", Value::IntValue(77)),
                    ],
                    ..Default::default()
                }),
                scope_logs: vec![ScopeLogs {
                    log_records: (0..n).map(rec).chain([LogRecord::default()]).collect(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    #[test]
    fn batches_are_per_process_and_capped() {
        let n = MAX_BATCH_EVENTS + 10;
        let d = logs("otlp_grpc", &OtlpAttributeNames::default(), &request(n));
        assert_eq!(d.events, n as u64);
        assert_eq!(d.not_syscall, 1);
        assert_eq!(d.rejected, 0);
        let sizes: Vec<usize> = d.batches.iter().map(|b| b.events.len()).collect();
        assert_eq!(sizes, vec![MAX_BATCH_EVENTS, 10]);
        for b in &d.batches {
            assert_eq!(b.source, "otlp_grpc");
            assert_eq!(b.process.pid, Some(77));
            assert_eq!(b.process.service_name.as_deref(), Some("db"));
            assert!(b.events.iter().all(|e| e.pid == 77));
        }
    }

    #[test]
    fn a_record_s_own_process_attributes_win_over_its_resource_s() {
        let mut req = request(2);
        let records = &mut req.resource_logs[0].scope_logs[0].log_records;
        records[0]
            .attributes
            .push(kv("service.name", Value::StringValue("api".into())));
        records[1]
            .attributes
            .push(kv("host.name", Value::StringValue("node-7".into())));
        let d = logs("otlp_http", &OtlpAttributeNames::default(), &req);
        let got: Vec<_> = d
            .batches
            .iter()
            .map(|b| {
                (
                    b.process.service_name.as_deref(),
                    b.process.host.as_deref(),
                    b.process.pid,
                    b.events.len(),
                )
            })
            .collect();
        // The record's service, the resource's pid; the other keeps the resource's
        // service with its own host.
        assert_eq!(
            got,
            vec![
                (Some("api"), None, Some(77), 1),
                (Some("db"), Some("node-7"), Some(77), 1)
            ]
        );
    }

    #[test]
    fn many_processes_group_in_first_seen_order_at_a_cost_per_record() {
        let mut g = Grouper::new("otlp_grpc");
        let procs = 5_000u32;
        let read = faultline_engine::SyscallId::from_name("read");
        // Two rounds over every process, interleaved: each record's group is not the last.
        for round in 0..2u64 {
            for pid in 0..procs {
                let process = ProcessInfo {
                    pid: Some(pid),
                    service_name: Some(format!("svc{}", pid % 7)),
                    ..ProcessInfo::default()
                };
                let ev = SyscallEvent::complete(0, pid, read, round, 5);
                g.add(&process, Mapped::Event(ev));
            }
        }
        let records = 2 * u64::from(procs);
        assert!(
            g.compared <= 2 * records,
            "{} key comparisons for {records} records",
            g.compared
        );
        let d = g.finish();
        let order: Vec<_> = d.batches.iter().map(|b| b.process.pid).collect();
        assert_eq!(order, (0..procs).map(Some).collect::<Vec<_>>());
        assert!(d.batches.iter().all(|b| b.events.len() == 2));
        assert!(d
            .batches
            .iter()
            .all(|b| b.process.service_name == Some(format!("svc{}", b.process.pid.unwrap() % 7))));
    }

    #[test]
    fn a_record_pid_splits_the_batch() {
        let mut req = request(2);
        if let Some(r) = req.resource_logs[0].scope_logs[0].log_records.get_mut(0) {
            r.attributes.push(kv("process.pid", Value::IntValue(78)));
        }
        let d = logs("otlp_http", &OtlpAttributeNames::default(), &req);
        let mut pids: Vec<_> = d
            .batches
            .iter()
            .map(|b| (b.process.pid, b.events.len()))
            .collect();
        pids.sort();
        assert_eq!(pids, vec![(Some(77), 1), (Some(78), 1)]);
    }
}
