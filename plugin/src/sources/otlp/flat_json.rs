//! What Vector's `http` sink sends with `encoding.codec: json`: a JSON array (or
//! newline-delimited objects) of flat events carrying the same attribute names as OTLP
//! records. Nested objects (`{"syscall": {"name": "read"}}`, how VRL paths serialize) are
//! read as dotted names, so both spellings work.

use serde_json::Value;

use super::attributes::{AttrValue, Attrs, OtlpAttributeNames};
use super::convert::{process_info, Decoded, Grouper};
use super::record::{map_record, RecordTime};

/// Nesting deeper than this is not an event shape we read; it bounds recursion on input.
const MAX_DEPTH: usize = 8;

/// Field names that give the event time when no `syscall.enter_ns` is present.
const TIME_FIELDS: [&str; 3] = ["time_unix_nano", "timeUnixNano", "timestamp"];

/// One event's scalar fields under their dotted names.
struct FlatObject(Vec<(String, Value)>);

impl FlatObject {
    fn from_value(v: &Value) -> Option<Self> {
        let mut out = Vec::new();
        flatten("", v.as_object()?, 0, &mut out);
        Some(Self(out))
    }
}

fn flatten(
    prefix: &str,
    obj: &serde_json::Map<String, Value>,
    depth: usize,
    out: &mut Vec<(String, Value)>,
) {
    for (k, v) in obj {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            Value::Object(inner) if depth < MAX_DEPTH => flatten(&key, inner, depth + 1, out),
            Value::String(_) | Value::Number(_) | Value::Bool(_) => out.push((key, v.clone())),
            _ => {}
        }
    }
}

impl Attrs for FlatObject {
    fn get(&self, key: &str) -> Option<AttrValue<'_>> {
        let (_, v) = self.0.iter().find(|(k, _)| k == key)?;
        match v {
            Value::String(s) => Some(AttrValue::Str(s)),
            Value::Bool(b) => Some(AttrValue::Bool(*b)),
            Value::Number(n) => n
                .as_i64()
                .map(AttrValue::Int)
                .or_else(|| n.as_f64().map(AttrValue::Double)),
            _ => None,
        }
    }
}

/// Decodes a body; `Err` when it is not JSON events at all (answered 400).
pub(crate) fn decode(
    source: &'static str,
    names: &OtlpAttributeNames,
    body: &[u8],
) -> Result<Decoded, String> {
    let mut g = Grouper::new(source);
    let text = std::str::from_utf8(body).map_err(|e| format!("body is not UTF-8: {e}"))?;
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        let values: Vec<Value> =
            serde_json::from_str(trimmed).map_err(|e| format!("invalid JSON array: {e}"))?;
        for v in &values {
            add_value(&mut g, names, v);
        }
    } else {
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            match serde_json::from_str::<Value>(line) {
                Ok(v) => add_value(&mut g, names, &v),
                Err(e) => g.reject(|| format!("line {}: invalid JSON: {e}", i + 1)),
            }
        }
    }
    Ok(g.finish())
}

fn add_value(g: &mut Grouper, names: &OtlpAttributeNames, v: &Value) {
    let Some(obj) = FlatObject::from_value(v) else {
        g.reject(|| "event is not a JSON object".to_string());
        return;
    };
    let time = TIME_FIELDS
        .iter()
        .find_map(|f| match obj.get(f)? {
            AttrValue::Str(s) => s
                .parse()
                .ok()
                .or_else(|| crate::time::rfc3339_to_unix_ns(s)),
            other => other.as_u64(),
        })
        .unwrap_or(0);
    let process = process_info(names, &obj);
    g.add(
        &process,
        map_record(names, &obj, RecordTime::Instant(time), None),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_ndjson_and_nested_objects_decode_alike() {
        let names = OtlpAttributeNames::default();
        let array = br#"[{"syscall.name":"read","thread.id":5,"process.pid":"9","syscall.duration_ns":100,"timestamp":"1970-01-01T00:00:01Z","service.name":"db"},
                         {"syscall":{"name":"write","duration_ns":"7"},"thread":{"id":6},"time_unix_nano":2000,"service":{"name":"db"},"process":{"pid":9}},
                         {"message":"not a syscall"}]"#;
        let d = decode("otlp_http", &names, array).unwrap();
        assert_eq!((d.events, d.not_syscall, d.rejected), (2, 1, 0));
        assert_eq!(d.batches.len(), 1);
        let evs = &d.batches[0].events;
        assert_eq!(
            (evs[0].tid, evs[0].ts_ns, evs[0].duration_ns),
            (5, 1_000_000_000, 100)
        );
        assert_eq!((evs[1].tid, evs[1].ts_ns, evs[1].duration_ns), (6, 2000, 7));
        assert_eq!(d.batches[0].process.service_name.as_deref(), Some("db"));

        let nd = b"{\"syscall.name\":\"read\",\"thread.id\":5,\"syscall.duration_ns\":1,\"timestamp\":3}\n\nnot json\n";
        let d = decode("otlp_http", &names, nd).unwrap();
        assert_eq!((d.events, d.rejected), (1, 1));
        assert!(decode("otlp_http", &names, b"[{").is_err());
    }
}
