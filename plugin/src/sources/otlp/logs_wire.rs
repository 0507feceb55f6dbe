//! `ExportLogsServiceRequest` bytes → [`Decoded`] without building prost's owned tree.
//!
//! prost allocates a `String` per attribute key and string value, a `Vec` per attribute
//! list and a large struct per record, then `convert::logs` reads a handful of attributes
//! and drops it all: most of the receiver's CPU went to that. This walk borrows keys and
//! values from the request bytes and maps each record as it passes, through the same
//! `convert::Grouper` and `record::map_record` as the prost path, so both give identical
//! batches.
//!
//! It only ever succeeds where prost would: every field prost checks (wire types, UTF-8 of
//! strings, varint limits, framing) is checked here too, and the rare shapes whose prost
//! semantics are merges (a second `resource` in one `ResourceLogs`, a second `value` in one
//! `KeyValue`) or deep nesting (array or kvlist values) give [`Unsupported`], after which
//! the caller decodes with prost — the reference path, which also words the errors.

use super::attributes::{AttrValue, Attrs, Layered, OtlpAttributeNames};
use super::convert::{process_info, record_process, Decoded, Grouper};
use super::record::{map_record, RecordTime};
use super::wire::{Fields, Unsupported};
use crate::sources::MAX_BATCH_EVENTS;

/// One attribute as the mapping sees it: `None` for value types it does not read
/// (bytes, arrays, absent), exactly like the prost-based lookup.
#[derive(Clone, Copy, Debug)]
struct WireAttr<'a> {
    key: &'a str,
    value: Option<AttrValue<'a>>,
}

/// Same lookup rule as `impl Attrs for [KeyValue]`: the first attribute with the key
/// decides, even when its value is unusable.
impl Attrs for [WireAttr<'_>] {
    fn get(&self, key: &str) -> Option<AttrValue<'_>> {
        self.iter().find(|a| a.key == key)?.value
    }
}

/// Decodes a serialized `ExportLogsServiceRequest`, or says prost must.
pub(crate) fn logs(
    source: &'static str,
    names: &OtlpAttributeNames,
    body: &[u8],
) -> Result<Decoded, Unsupported> {
    let mut g = Grouper::new(source);
    // Reused for every resource and record: both borrow from `body`.
    let mut res_attrs: Vec<WireAttr<'_>> = Vec::with_capacity(16);
    let mut rec_attrs: Vec<WireAttr<'_>> = Vec::with_capacity(16);
    for f in Fields::new(body) {
        // Unknown fields are skipped, as prost does.
        if let (1, f) = f? {
            resource_logs(names, f.bytes()?, &mut g, &mut res_attrs, &mut rec_attrs)?;
        }
    }
    Ok(g.finish())
}

fn resource_logs<'a>(
    names: &OtlpAttributeNames,
    buf: &'a [u8],
    g: &mut Grouper,
    res_attrs: &mut Vec<WireAttr<'a>>,
    rec_attrs: &mut Vec<WireAttr<'a>>,
) -> Result<(), Unsupported> {
    // Pass 1: the resource (wherever it is in the bytes), validation, and a record count.
    let mut resource = None;
    let mut records = 0usize;
    for f in Fields::new(buf) {
        match f? {
            // A second occurrence is merged by prost: leave that to prost.
            (1, f) => resource = Some(first_only(resource, f.bytes()?)?),
            (2, f) => records += count_records(f.bytes()?)?,
            (3, f) => {
                f.string()?;
            }
            _ => {}
        }
    }
    res_attrs.clear();
    if let Some(r) = resource {
        parse_resource(r, res_attrs)?;
    }
    let process = process_info(names, res_attrs.as_slice());
    g.expect_records(records.min(MAX_BATCH_EVENTS));
    // Pass 2: the records, in order.
    for f in Fields::new(buf) {
        if let (2, f) = f? {
            scope_logs(names, f.bytes()?, g, &process, res_attrs, rec_attrs)?;
        }
    }
    Ok(())
}

/// `new` if `seen` is empty: a singular message field given twice is merged by prost.
fn first_only<T>(seen: Option<T>, new: T) -> Result<T, Unsupported> {
    match seen {
        None => Ok(new),
        Some(_) => Err(Unsupported),
    }
}

/// Log records in one `ScopeLogs` (a cheap skip over each record's bytes).
fn count_records(buf: &[u8]) -> Result<usize, Unsupported> {
    let mut n = 0;
    for f in Fields::new(buf) {
        if let (2, _) = f? {
            n += 1;
        }
    }
    Ok(n)
}

fn parse_resource<'a>(buf: &'a [u8], attrs: &mut Vec<WireAttr<'a>>) -> Result<(), Unsupported> {
    for f in Fields::new(buf) {
        match f? {
            (1, f) => attrs.push(key_value(f.bytes()?)?),
            (2, f) => {
                f.varint()?;
            }
            (3, f) => entity_ref(f.bytes()?)?,
            _ => {}
        }
    }
    Ok(())
}

/// `EntityRef`: four string fields (two repeated); only validated.
fn entity_ref(buf: &[u8]) -> Result<(), Unsupported> {
    for f in Fields::new(buf) {
        if let (1..=4, f) = f? {
            f.string()?;
        }
    }
    Ok(())
}

fn scope_logs<'a>(
    names: &OtlpAttributeNames,
    buf: &'a [u8],
    g: &mut Grouper,
    process: &crate::model::ProcessInfo,
    res_attrs: &[WireAttr<'a>],
    rec_attrs: &mut Vec<WireAttr<'a>>,
) -> Result<(), Unsupported> {
    for f in Fields::new(buf) {
        match f? {
            (1, f) => scope(f.bytes()?)?,
            (2, f) => {
                rec_attrs.clear();
                let t = log_record(f.bytes()?, rec_attrs)?;
                let attrs = Layered {
                    first: rec_attrs.as_slice(),
                    then: res_attrs,
                };
                let own = record_process(names, rec_attrs.as_slice(), &attrs, process);
                g.add(
                    &own,
                    map_record(names, &attrs, RecordTime::Instant(t), None),
                );
            }
            (3, f) => {
                f.string()?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// `InstrumentationScope`: not used, only validated as prost would.
fn scope(buf: &[u8]) -> Result<(), Unsupported> {
    for f in Fields::new(buf) {
        match f? {
            (1 | 2, f) => {
                f.string()?;
            }
            (3, f) => {
                key_value(f.bytes()?)?;
            }
            (4, f) => {
                f.varint()?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// A log record's attributes (into `attrs`) and its time: `time_unix_nano`, else
/// `observed_time_unix_nano` (0 when neither is set).
fn log_record<'a>(buf: &'a [u8], attrs: &mut Vec<WireAttr<'a>>) -> Result<u64, Unsupported> {
    let (mut time, mut observed) = (0, 0);
    for f in Fields::new(buf) {
        match f? {
            (1, f) => time = f.fixed64()?,
            (11, f) => observed = f.fixed64()?,
            (2 | 7, f) => {
                f.varint()?;
            }
            (3 | 12, f) => {
                f.string()?;
            }
            (5, f) => {
                any_value(f.bytes()?)?;
            }
            (6, f) => attrs.push(key_value(f.bytes()?)?),
            (8, f) => {
                f.fixed32()?;
            }
            (9 | 10, f) => {
                f.bytes()?;
            }
            _ => {}
        }
    }
    Ok(if time != 0 { time } else { observed })
}

/// `KeyValue`: the last `key` wins (prost replaces strings); a second `value` would be merged.
fn key_value(buf: &[u8]) -> Result<WireAttr<'_>, Unsupported> {
    let mut key = "";
    let mut value: Option<Option<AttrValue<'_>>> = None;
    for f in Fields::new(buf) {
        match f? {
            (1, f) => key = f.string()?,
            (2, f) => value = Some(first_only(value, any_value(f.bytes()?)?)?),
            (3, f) => {
                f.varint()?;
            }
            _ => {}
        }
    }
    Ok(WireAttr {
        key,
        value: value.flatten(),
    })
}

/// `AnyValue`: the oneof's last scalar wins, as in prost; nested values go to prost.
fn any_value(buf: &[u8]) -> Result<Option<AttrValue<'_>>, Unsupported> {
    let mut v = None;
    for f in Fields::new(buf) {
        v = match f? {
            (1, f) => Some(AttrValue::Str(f.string()?)),
            (2, f) => Some(AttrValue::Bool(f.varint()? != 0)),
            (3, f) => Some(AttrValue::Int(f.varint()? as i64)),
            (4, f) => Some(AttrValue::Double(f64::from_bits(f.fixed64()?))),
            (5 | 6, _) => return Err(Unsupported),
            (7, f) => {
                f.bytes()?;
                None
            }
            (8, f) => {
                f.varint()?;
                None
            }
            _ => continue,
        };
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::otlp::convert;
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{
        any_value::Value, AnyValue, ArrayValue, InstrumentationScope, KeyValue,
    };
    use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use proptest::prelude::*;
    use prost::Message;

    /// A real request of the OpenTelemetry Python SDK (1.45, OTLP/HTTP exporter) sent by
    /// `integration-tests/otlp/send_syscalls.py --threads 3 --calls 20 --noise 3 --bad 2`:
    /// scope, body, observed time and SDK resource attributes included.
    const PYTHON_SDK: &[u8] = include_bytes!("../../../tests/data/otlp_python_sdk_logs.pb");

    /// Everything a `Decoded` carries, comparable.
    fn summary(d: &Decoded) -> String {
        format!(
            "{:?} {} {} {} {} {:?}",
            d.batches
                .iter()
                .map(|b| (b.source, &b.process, &b.events))
                .collect::<Vec<_>>(),
            d.events,
            d.rejected,
            d.not_syscall,
            d.unused_metric_points,
            d.first_error
        )
    }

    /// The reference: prost's owned tree, then `convert::logs`; `None` = malformed.
    fn via_prost(names: &OtlpAttributeNames, body: &[u8]) -> Option<String> {
        let req = ExportLogsServiceRequest::decode(body).ok()?;
        Some(summary(&convert::logs("otlp_grpc", names, &req)))
    }

    /// What the receiver does: the walk, falling back to prost.
    fn via_receiver(names: &OtlpAttributeNames, body: &[u8]) -> Option<String> {
        match logs("otlp_grpc", names, body) {
            Ok(d) => Some(summary(&d)),
            Err(Unsupported) => via_prost(names, body),
        }
    }

    fn kv(key: &str, v: Option<Value>) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: v.map(|v| AnyValue { value: Some(v) }),
            ..Default::default()
        }
    }
    fn int(key: &str, i: i64) -> KeyValue {
        kv(key, Some(Value::IntValue(i)))
    }
    fn text(key: &str, s: &str) -> KeyValue {
        kv(key, Some(Value::StringValue(s.into())))
    }

    /// Records exercising every value type, lookup rule and rejection the mapping has.
    fn varied_request() -> ExportLogsServiceRequest {
        let rec = |attrs: Vec<KeyValue>, time: u64, observed: u64| LogRecord {
            time_unix_nano: time,
            observed_time_unix_nano: observed,
            attributes: attrs,
            severity_text: "INFO".into(),
            body: Some(AnyValue {
                value: Some(Value::StringValue("syscall".into())),
            }),
            trace_id: vec![1; 16],
            flags: 1,
            ..Default::default()
        };
        let records = vec![
            rec(
                vec![
                    int("thread.id", 5),
                    text("syscall.name", "read"),
                    int("syscall.duration_ns", 10),
                ],
                100,
                0,
            ),
            // Observed time stands in; numbers as strings and integral doubles.
            rec(
                vec![
                    text("thread.id", " 6 "),
                    text("syscall.name", "sys_write"),
                    kv("syscall.duration_ns", Some(Value::DoubleValue(20.0))),
                    kv("syscall.ret", Some(Value::DoubleValue(-1.5))),
                    int("perf.cycles", 77),
                ],
                0,
                200,
            ),
            // The first `thread.id` decides even without a value: rejected.
            rec(
                vec![
                    kv("thread.id", None),
                    int("thread.id", 7),
                    text("syscall.name", "read"),
                    int("syscall.duration_ns", 1),
                ],
                300,
                0,
            ),
            // Bytes and bool values are not numbers; unknown names are rejected.
            rec(
                vec![
                    kv("thread.id", Some(Value::BytesValue(vec![1]))),
                    text("syscall.name", "read"),
                ],
                400,
                0,
            ),
            rec(
                vec![
                    kv("thread.id", Some(Value::BoolValue(true))),
                    text("syscall.name", "nope"),
                ],
                400,
                0,
            ),
            // Phases, syscall numbers and a pid of its own (a second process).
            rec(
                vec![
                    int("thread.id", 8),
                    int("syscall.nr", 0),
                    text("syscall.arch", "arm64"),
                    text("syscall.phase", "enter"),
                    int("process.pid", 99),
                ],
                500,
                0,
            ),
            rec(
                vec![int("thread.id", 8), text("syscall.phase", "exit")],
                600,
                0,
            ),
            // Other telemetry.
            rec(vec![text("http.route", "/x")], 700, 0),
        ];
        let resource = |pid: i64, service: &str| Resource {
            attributes: vec![
                text("service.name", service),
                int("process.pid", pid),
                text("host.name", "h"),
                text("process.executable.name", "db"),
            ],
            ..Default::default()
        };
        ExportLogsServiceRequest {
            resource_logs: vec![
                ResourceLogs {
                    resource: Some(resource(40, "a")),
                    scope_logs: vec![
                        ScopeLogs {
                            scope: Some(InstrumentationScope {
                                name: "s".into(),
                                version: "1".into(),
                                attributes: vec![text("k", "v")],
                                ..Default::default()
                            }),
                            log_records: records.clone(),
                            schema_url: "u".into(),
                        },
                        ScopeLogs {
                            log_records: records[..2].to_vec(),
                            ..Default::default()
                        },
                    ],
                    schema_url: "u".into(),
                },
                ResourceLogs {
                    resource: Some(resource(41, "b")),
                    scope_logs: vec![ScopeLogs {
                        log_records: records,
                        ..Default::default()
                    }],
                    ..Default::default()
                },
                // No resource at all.
                ResourceLogs {
                    scope_logs: vec![ScopeLogs {
                        log_records: vec![rec(
                            vec![
                                int("thread.id", 1),
                                text("syscall.name", "read"),
                                int("syscall.duration_ns", 1),
                            ],
                            1,
                            0,
                        )],
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            ],
        }
    }

    #[test]
    fn python_sdk_request_decodes_identically_without_prost() {
        let names = OtlpAttributeNames::default();
        let fast = logs("otlp_grpc", &names, PYTHON_SDK).expect("walk handles the SDK shape");
        assert_eq!(fast.events, 60);
        assert_eq!((fast.not_syscall, fast.rejected), (3, 2));
        assert_eq!(Some(summary(&fast)), via_prost(&names, PYTHON_SDK));
    }

    #[test]
    fn varied_records_decode_identically_without_prost() {
        let body = varied_request().encode_to_vec();
        let names = OtlpAttributeNames::default();
        let fast = logs("otlp_grpc", &names, &body).expect("walk handles it");
        assert!(fast.rejected > 0 && fast.not_syscall > 0 && fast.events > 0);
        assert!(fast.batches.iter().any(|b| b.process.pid == Some(99)));
        assert_eq!(Some(summary(&fast)), via_prost(&names, &body));
        // Configured names: here no record has the thread id attribute, all are rejected.
        let names = OtlpAttributeNames {
            thread_id: "os.tid".into(),
            ..OtlpAttributeNames::default()
        };
        let fast = logs("otlp_grpc", &names, &body).expect("walk handles it");
        assert_eq!(fast.events, 0);
        assert_eq!(Some(summary(&fast)), via_prost(&names, &body));
    }

    #[test]
    fn record_level_process_attributes_decode_identically_without_prost() {
        let mut req = varied_request();
        for (i, rec) in req
            .resource_logs
            .iter_mut()
            .flat_map(|r| r.scope_logs.iter_mut())
            .flat_map(|s| s.log_records.iter_mut())
            .enumerate()
        {
            match i % 3 {
                0 => rec.attributes.push(text("service.name", "moved")),
                1 => rec
                    .attributes
                    .push(text("process.executable.name", "worker")),
                _ => {}
            }
        }
        let body = req.encode_to_vec();
        let names = OtlpAttributeNames::default();
        let fast = logs("otlp_grpc", &names, &body).expect("walk handles it");
        assert!(fast
            .batches
            .iter()
            .any(|b| b.process.service_name.as_deref() == Some("moved")));
        assert!(fast
            .batches
            .iter()
            .any(|b| b.process.comm.as_deref() == Some("worker")));
        assert_eq!(Some(summary(&fast)), via_prost(&names, &body));
    }

    #[test]
    fn full_batches_are_cut_alike() {
        let rec = |i: u64| LogRecord {
            time_unix_nano: 1 + i,
            attributes: vec![
                int("thread.id", (i % 7) as i64),
                text("syscall.name", "futex"),
                int("syscall.duration_ns", 3),
            ],
            ..Default::default()
        };
        let req = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                scope_logs: vec![ScopeLogs {
                    log_records: (0..MAX_BATCH_EVENTS as u64 + 5).map(rec).collect(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let body = req.encode_to_vec();
        let names = OtlpAttributeNames::default();
        let fast = logs("otlp_grpc", &names, &body).expect("walk");
        assert_eq!(fast.batches.len(), 2);
        assert_eq!(Some(summary(&fast)), via_prost(&names, &body));
    }

    #[test]
    fn field_order_does_not_matter() {
        // scope_logs (2) before resource (1): legal protobuf, although prost writes in order.
        let req = varied_request();
        let Some(rl) = req.resource_logs.first() else {
            panic!("no resource logs");
        };
        let mut inner = Vec::new();
        for s in &rl.scope_logs {
            prost::encoding::message::encode(2, s, &mut inner);
        }
        if let Some(r) = &rl.resource {
            prost::encoding::message::encode(1, r, &mut inner);
        }
        let mut body = Vec::new();
        prost::encoding::bytes::encode(1, &inner, &mut body);
        let names = OtlpAttributeNames::default();
        let fast = logs("otlp_grpc", &names, &body).expect("walk");
        assert_eq!(Some(summary(&fast)), via_prost(&names, &body));
    }

    #[test]
    fn merges_and_nested_values_are_left_to_prost() {
        let names = OtlpAttributeNames::default();
        // An array value: prost decodes it, the walk declines, the receiver agrees with prost.
        let mut req = varied_request();
        if let Some(r) = req.resource_logs[0].scope_logs[0].log_records.get_mut(0) {
            r.attributes.insert(
                0,
                kv(
                    "syscall.ret",
                    Some(Value::ArrayValue(ArrayValue { values: vec![] })),
                ),
            );
        }
        let body = req.encode_to_vec();
        assert_eq!(logs("otlp_grpc", &names, &body).err(), Some(Unsupported));
        assert_eq!(via_receiver(&names, &body), via_prost(&names, &body));
        assert!(via_prost(&names, &body).is_some());

        // Two `resource` fields in one ResourceLogs: prost merges their attributes.
        let mut inner = Vec::new();
        let r1 = Resource {
            attributes: vec![text("service.name", "x")],
            ..Default::default()
        };
        let r2 = Resource {
            attributes: vec![int("process.pid", 5)],
            ..Default::default()
        };
        prost::encoding::message::encode(1, &r1, &mut inner);
        prost::encoding::message::encode(1, &r2, &mut inner);
        prost::encoding::message::encode(2, &req.resource_logs[0].scope_logs[0], &mut inner);
        let mut body = Vec::new();
        prost::encoding::bytes::encode(1, &inner, &mut body);
        assert_eq!(logs("otlp_grpc", &names, &body).err(), Some(Unsupported));
        let merged = via_receiver(&names, &body).expect("prost decodes it");
        assert!(merged.contains("pid: Some(5)") && merged.contains("\"x\""));
    }

    #[test]
    fn malformed_inputs_of_the_tests_are_declined() {
        let names = OtlpAttributeNames::default();
        // The bytes the receiver tests send, a string that is not UTF-8, a truncation.
        let mut bad_utf8 = Vec::new();
        let key = KeyValue {
            key: "k".into(),
            ..Default::default()
        }
        .encode_to_vec();
        let mut rec = Vec::new();
        prost::encoding::bytes::encode(6, &key, &mut rec);
        if let Some(b) = rec.iter_mut().rev().find(|b| **b == b'k') {
            *b = 0xff;
        }
        let mut scope = Vec::new();
        prost::encoding::bytes::encode(2, &rec, &mut scope);
        let mut rl = Vec::new();
        prost::encoding::bytes::encode(2, &scope, &mut rl);
        prost::encoding::bytes::encode(1, &rl, &mut bad_utf8);
        for body in [
            &[0xff, 0xff, 0xff, 0x0f][..],
            &bad_utf8,
            &PYTHON_SDK[..PYTHON_SDK.len() - 3],
        ] {
            assert_eq!(logs("otlp_grpc", &names, body).err(), Some(Unsupported));
            assert_eq!(via_prost(&names, body), None, "prost refuses it too");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Corrupted and truncated SDK requests: the receiver always ends where prost does.
        #[test]
        fn corrupted_requests_match_prost(
            cut in 0..PYTHON_SDK.len(),
            flips in proptest::collection::vec((0..PYTHON_SDK.len(), any::<u8>()), 0..4),
        ) {
            let mut body = PYTHON_SDK.to_vec();
            for (at, byte) in flips {
                if let Some(b) = body.get_mut(at) {
                    *b = byte;
                }
            }
            body.truncate(cut.max(1));
            let names = OtlpAttributeNames::default();
            if let Ok(d) = logs("otlp_grpc", &names, &body) {
                prop_assert_eq!(Some(summary(&d)), via_prost(&names, &body));
            }
            prop_assert_eq!(via_receiver(&names, &body), via_prost(&names, &body));
        }
    }
}
