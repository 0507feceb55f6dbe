//! Which OTLP attribute carries which syscall field, and a uniform way to read attribute
//! values whatever their OTLP type (senders differ: the Python SDK sends ints, Vector and
//! hand-written JSON often send numbers as strings).

use opentelemetry_proto::tonic::common::v1::{any_value::Value, KeyValue};
use serde::{Deserialize, Serialize};

/// Attribute names faultline reads; every one is configurable so existing instrumentation
/// can be used without renaming its attributes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OtlpAttributeNames {
    /// Resource attribute naming the service (routing to targets).
    pub service_name: String,
    /// Resource attribute naming the host.
    pub host_name: String,
    /// Resource (or record) attribute with the process id.
    pub process_pid: String,
    /// Resource attribute with the executable name (matched like a process name).
    pub process_executable_name: String,
    /// Record attribute with the OS thread id (OTel's `thread.id` is meant as the managed
    /// thread id; faultline needs the kernel tid there, or another attribute named here).
    pub thread_id: String,
    /// Record attribute with the syscall name (`read`, `sys_futex`, ...).
    pub syscall_name: String,
    /// Record attribute with the syscall number, used when no name is given.
    pub syscall_nr: String,
    /// Architecture of `syscall_nr` (`x86_64`/`amd64`, `aarch64`/`arm64`); x86_64 when absent.
    pub syscall_arch: String,
    /// Execution time of the call in nanoseconds.
    pub syscall_duration_ns: String,
    /// Entry time of the call (Unix ns); else the record's time is the entry time.
    pub syscall_enter_ns: String,
    /// Exit time of the call (Unix ns).
    pub syscall_exit_ns: String,
    /// `enter`/`exit` for senders that emit the two halves of a call as separate records.
    pub syscall_phase: String,
    /// Return value (negative errno on failure).
    pub syscall_ret: String,
    pub perf_cycles: String,
    pub perf_instructions: String,
    pub perf_cache_misses: String,
    pub perf_context_switches: String,
}

impl Default for OtlpAttributeNames {
    fn default() -> Self {
        Self {
            service_name: "service.name".into(),
            host_name: "host.name".into(),
            process_pid: "process.pid".into(),
            process_executable_name: "process.executable.name".into(),
            thread_id: "thread.id".into(),
            syscall_name: "syscall.name".into(),
            syscall_nr: "syscall.nr".into(),
            syscall_arch: "syscall.arch".into(),
            syscall_duration_ns: "syscall.duration_ns".into(),
            syscall_enter_ns: "syscall.enter_ns".into(),
            syscall_exit_ns: "syscall.exit_ns".into(),
            syscall_phase: "syscall.phase".into(),
            syscall_ret: "syscall.ret".into(),
            perf_cycles: "perf.cycles".into(),
            perf_instructions: "perf.instructions".into(),
            perf_cache_misses: "perf.cache_misses".into(),
            perf_context_switches: "perf.context_switches".into(),
        }
    }
}

/// One attribute value, borrowed from whichever representation the request used.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum AttrValue<'a> {
    Int(i64),
    Double(f64),
    Str(&'a str),
    Bool(bool),
}

impl AttrValue<'_> {
    /// The value as an integer: ints, integral doubles and decimal strings qualify.
    pub(crate) fn as_i64(self) -> Option<i64> {
        match self {
            AttrValue::Int(i) => Some(i),
            AttrValue::Double(d) if d.fract() == 0.0 && d.abs() < 9.0e18 => Some(d as i64),
            AttrValue::Str(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    /// The value as a non-negative integer.
    pub(crate) fn as_u64(self) -> Option<u64> {
        self.as_i64().and_then(|i| u64::try_from(i).ok())
    }

    /// The value as text (numbers are not stringified: a name must be a string).
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            AttrValue::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// Read access to a set of attributes, so OTLP key/value lists and flat JSON objects go
/// through the same record mapping.
pub(crate) trait Attrs {
    fn get(&self, key: &str) -> Option<AttrValue<'_>>;
}

/// OTLP attribute lists are short, so a linear scan beats building a map per record.
impl Attrs for [KeyValue] {
    fn get(&self, key: &str) -> Option<AttrValue<'_>> {
        let kv = self.iter().find(|kv| kv.key == key)?;
        match kv.value.as_ref()?.value.as_ref()? {
            Value::IntValue(i) => Some(AttrValue::Int(*i)),
            Value::DoubleValue(d) => Some(AttrValue::Double(*d)),
            Value::StringValue(s) => Some(AttrValue::Str(s)),
            Value::BoolValue(b) => Some(AttrValue::Bool(*b)),
            _ => None,
        }
    }
}

/// Attributes of the record first, then of its resource: senders differ on where they put
/// process-level attributes.
pub(crate) struct Layered<'a, A: ?Sized, B: ?Sized> {
    pub first: &'a A,
    pub then: &'a B,
}

impl<A: Attrs + ?Sized, B: Attrs + ?Sized> Attrs for Layered<'_, A, B> {
    fn get(&self, key: &str) -> Option<AttrValue<'_>> {
        self.first.get(key).or_else(|| self.then.get(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::AnyValue;

    fn kv(key: &str, v: Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(v) }),
            ..Default::default()
        }
    }

    #[test]
    fn numbers_are_read_from_ints_strings_and_integral_doubles() {
        let attrs = vec![
            kv("a", Value::IntValue(-4)),
            kv("b", Value::StringValue(" 17 ".into())),
            kv("c", Value::DoubleValue(3.0)),
            kv("d", Value::DoubleValue(3.5)),
            kv("e", Value::BoolValue(true)),
        ];
        let a: &[KeyValue] = &attrs;
        assert_eq!(Attrs::get(a, "a").and_then(AttrValue::as_i64), Some(-4));
        assert_eq!(Attrs::get(a, "a").and_then(AttrValue::as_u64), None);
        assert_eq!(Attrs::get(a, "b").and_then(AttrValue::as_u64), Some(17));
        assert_eq!(Attrs::get(a, "c").and_then(AttrValue::as_u64), Some(3));
        assert_eq!(Attrs::get(a, "d").and_then(AttrValue::as_i64), None);
        assert_eq!(Attrs::get(a, "e").and_then(AttrValue::as_i64), None);
        assert!(Attrs::get(a, "missing").is_none());
    }

    #[test]
    fn record_attributes_shadow_resource_attributes() {
        let rec = vec![kv("process.pid", Value::IntValue(7))];
        let res = vec![
            kv("process.pid", Value::IntValue(1)),
            kv("service.name", Value::StringValue("db".into())),
        ];
        let l = Layered {
            first: rec.as_slice(),
            then: res.as_slice(),
        };
        assert_eq!(l.get("process.pid").and_then(AttrValue::as_u64), Some(7));
        assert_eq!(
            l.get("service.name")
                .and_then(|v| v.as_str().map(String::from)),
            Some("db".to_string())
        );
    }

    #[test]
    fn unknown_config_keys_are_rejected_and_missing_ones_defaulted() {
        let n: OtlpAttributeNames = serde_json::from_str(r#"{"thread_id":"os.tid"}"#).unwrap();
        assert_eq!(n.thread_id, "os.tid");
        assert_eq!(n.syscall_name, "syscall.name");
        assert!(serde_json::from_str::<OtlpAttributeNames>(r#"{"tid":"x"}"#).is_err());
    }
}
