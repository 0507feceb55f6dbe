//! Parsing of one line of `babeltrace2 --clock-seconds --no-delta` text output.
//!
//! ```text
//! [1457113582.794575646] wilbrod syscall_entry_ioctl: { cpu_id = 5 }, { fd = 23, cmd = 62981, arg = 0 }
//! [ts] host event: { packet context }, [{ event context (tid, pid, procname, perf_*) },] { payload }
//! ```
//! The payload is always the last `{ ... }` group and the packet context (with `cpu_id`) the
//! first; anything in between is context added with `lttng add-context`. The group matters:
//! `lttng_statedump_process_state` has `tid`/`pid` in its payload too.
//!
//! Fields are recorded as byte ranges into the line (no allocation per line); nested arrays
//! and structures are skipped as opaque values.

/// Where a field sits: which `{ ... }` group, its key and value as byte ranges of the line.
#[derive(Clone, Copy, Debug)]
struct Field {
    group: u8,
    key: (usize, usize),
    value: Value,
}

/// A field value: integers decoded, strings as ranges (without quotes), the rest opaque.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    Int(i64),
    /// Unsigned values above `i64::MAX` (addresses, counters).
    UInt(u64),
    Str(usize, usize),
    Other,
}

/// A parsed line; field lookups go through it.
#[derive(Debug, Default)]
pub struct TextLine {
    fields: Vec<Field>,
    groups: u8,
    pub ts_ns: u64,
    name: (usize, usize),
}

/// Why a line could not be parsed (for the log; all count as decode errors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

impl TextLine {
    /// Parses `line` into `self` (reusing its field buffer).
    pub fn parse(&mut self, line: &[u8]) -> Result<(), Malformed> {
        self.fields.clear();
        self.groups = 0;
        let mut p = Cursor { s: line, i: 0 };
        p.skip_ws();
        if !p.eat(b'[') {
            return Err(Malformed("no [timestamp]"));
        }
        let ts_end = p.find(b']').ok_or(Malformed("unterminated timestamp"))?;
        self.ts_ns = parse_seconds(line.get(p.i..ts_end).unwrap_or_default())
            .ok_or(Malformed("bad timestamp"))?;
        p.i = ts_end + 1;
        p.skip_ws();
        // Host name, then event name ending in ':'.
        let host_end = p.find(b' ').ok_or(Malformed("no event name"))?;
        p.i = host_end;
        p.skip_ws();
        let colon = p.find(b':').ok_or(Malformed("no event name"))?;
        self.name = (p.i, colon);
        if colon == p.i {
            return Err(Malformed("empty event name"));
        }
        p.i = colon + 1;
        loop {
            p.skip_ws();
            match p.peek() {
                None => break,
                Some(b',') => p.i += 1,
                Some(b'{') => {
                    p.i += 1;
                    self.parse_group(&mut p)?;
                    self.groups = self
                        .groups
                        .checked_add(1)
                        .ok_or(Malformed("too many groups"))?;
                }
                Some(_) => return Err(Malformed("expected {")),
            }
        }
        if self.groups == 0 {
            return Err(Malformed("no fields"));
        }
        Ok(())
    }

    fn parse_group(&mut self, p: &mut Cursor<'_>) -> Result<(), Malformed> {
        loop {
            p.skip_ws();
            match p.peek() {
                Some(b'}') => {
                    p.i += 1;
                    return Ok(());
                }
                Some(b',') => p.i += 1,
                Some(_) => {
                    let key_start = p.i;
                    while matches!(p.peek(), Some(c) if c != b' ' && c != b'=' && c != b'}') {
                        p.i += 1;
                    }
                    let key = (key_start, p.i);
                    p.skip_ws();
                    if !p.eat(b'=') {
                        return Err(Malformed("expected ="));
                    }
                    p.skip_ws();
                    let value = p.value()?;
                    self.fields.push(Field {
                        group: self.groups,
                        key,
                        value,
                    });
                }
                None => return Err(Malformed("unterminated {")),
            }
        }
    }

    /// The event name (e.g. `syscall_entry_read`).
    pub fn name<'a>(&self, line: &'a [u8]) -> &'a [u8] {
        line.get(self.name.0..self.name.1).unwrap_or_default()
    }

    /// A field of the payload (the last group).
    pub fn payload(&self, line: &[u8], key: &[u8]) -> Option<Value> {
        self.find(line, key, |g, n| g + 1 == n)
    }

    /// A field of the first group (stream packet context: `cpu_id`).
    pub fn packet(&self, line: &[u8], key: &[u8]) -> Option<Value> {
        self.find(line, key, |g, n| g == 0 && n > 1)
    }

    /// A field of the context groups between packet context and payload.
    pub fn context(&self, line: &[u8], key: &[u8]) -> Option<Value> {
        self.find(line, key, |g, n| g > 0 && g + 1 < n)
    }

    /// Context fields whose key starts with `prefix` (for `perf_*` counters).
    pub fn context_with_prefix<'a>(
        &'a self,
        line: &'a [u8],
        prefix: &'a [u8],
    ) -> impl Iterator<Item = (&'a [u8], Value)> + 'a {
        let n = self.groups;
        self.fields
            .iter()
            .filter(move |f| f.group > 0 && f.group + 1 < n)
            .filter_map(move |f| {
                let key = line.get(f.key.0..f.key.1)?;
                key.starts_with(prefix).then_some((key, f.value))
            })
    }

    fn find(&self, line: &[u8], key: &[u8], group_ok: impl Fn(u8, u8) -> bool) -> Option<Value> {
        self.fields
            .iter()
            .find(|f| group_ok(f.group, self.groups) && line.get(f.key.0..f.key.1) == Some(key))
            .map(|f| f.value)
    }
}

impl Value {
    /// The value as an integer, when it is one.
    pub fn int(self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(v),
            Value::UInt(v) => Some(v as i64),
            _ => None,
        }
    }

    /// The value as an unsigned integer, when it is a non-negative one.
    pub fn uint(self) -> Option<u64> {
        match self {
            Value::Int(v) => u64::try_from(v).ok(),
            Value::UInt(v) => Some(v),
            _ => None,
        }
    }

    /// The string's bytes, when it is a string.
    pub fn str(self, line: &[u8]) -> Option<&[u8]> {
        match self {
            Value::Str(a, b) => line.get(a..b),
            _ => None,
        }
    }
}

struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }
    fn find(&self, c: u8) -> Option<usize> {
        memchr::memchr(c, self.s.get(self.i..)?).map(|o| o + self.i)
    }

    fn value(&mut self) -> Result<Value, Malformed> {
        match self.peek() {
            Some(b'"') => {
                self.i += 1;
                let start = self.i;
                loop {
                    match self.peek() {
                        Some(b'\\') => self.i += 2,
                        Some(b'"') => break,
                        Some(_) => self.i += 1,
                        None => return Err(Malformed("unterminated string")),
                    }
                }
                let end = self.i;
                self.i += 1;
                Ok(Value::Str(start, end))
            }
            Some(b'[' | b'{') => {
                self.skip_nested()?;
                Ok(Value::Other)
            }
            Some(_) => {
                let start = self.i;
                while matches!(self.peek(), Some(c) if c != b',' && c != b'}' && c != b' ') {
                    self.i += 1;
                }
                let tok = self.s.get(start..self.i).unwrap_or_default();
                Ok(parse_number(tok).unwrap_or(Value::Other))
            }
            None => Err(Malformed("missing value")),
        }
    }

    /// Skips a bracketed value, minding strings; depth is bounded by the line length.
    fn skip_nested(&mut self) -> Result<(), Malformed> {
        let mut depth = 0usize;
        loop {
            match self.peek() {
                Some(b'[' | b'{') => depth += 1,
                Some(b']' | b'}') => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        self.i += 1;
                        return Ok(());
                    }
                }
                Some(b'"') => {
                    self.i += 1;
                    while !matches!(self.peek(), Some(b'"') | None) {
                        if self.peek() == Some(b'\\') {
                            self.i += 1;
                        }
                        self.i += 1;
                    }
                }
                Some(_) => {}
                None => return Err(Malformed("unterminated [ or {")),
            }
            self.i += 1;
        }
    }
}

/// Decimal (possibly negative) or `0x` hex integers; anything else (floats, enums) is `None`.
fn parse_number(tok: &[u8]) -> Option<Value> {
    if let Some(hex) = tok.strip_prefix(b"0x").or_else(|| tok.strip_prefix(b"0X")) {
        let v = u64::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
        return Some(i64::try_from(v).map_or(Value::UInt(v), Value::Int));
    }
    let (neg, digits) = match tok.strip_prefix(b"-") {
        Some(d) => (true, d),
        None => (false, tok),
    };
    if digits.is_empty() || digits.len() > 20 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    if neg {
        Some(Value::Int(0i64.checked_sub_unsigned(v)?))
    } else {
        Some(i64::try_from(v).map_or(Value::UInt(v), Value::Int))
    }
}

/// `1457113582.794575646` seconds to nanoseconds.
pub(super) fn parse_seconds(tok: &[u8]) -> Option<u64> {
    let dot = memchr::memchr(b'.', tok)?;
    let secs: u64 = std::str::from_utf8(tok.get(..dot)?).ok()?.parse().ok()?;
    let frac = tok.get(dot + 1..)?;
    if frac.is_empty() || frac.len() > 9 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut ns: u64 = std::str::from_utf8(frac).ok()?.parse().ok()?;
    for _ in frac.len()..9 {
        ns *= 10;
    }
    secs.checked_mul(1_000_000_000)?.checked_add(ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syscall_line_without_context() {
        let l = b"[1457113582.794575646] wilbrod syscall_entry_ioctl: { cpu_id = 5 }, { fd = 23, cmd = 62981, arg = 0 }";
        let mut t = TextLine::default();
        t.parse(l).unwrap();
        assert_eq!(t.ts_ns, 1_457_113_582_794_575_646);
        assert_eq!(t.name(l), b"syscall_entry_ioctl");
        assert_eq!(t.packet(l, b"cpu_id"), Some(Value::Int(5)));
        assert_eq!(t.payload(l, b"fd"), Some(Value::Int(23)));
        assert_eq!(t.context(l, b"fd"), None);
    }

    #[test]
    fn context_group_strings_arrays_and_hex() {
        let l = br#"[1.5] h lttng_statedump_process_state: { cpu_id = 1 }, { tid = 9, procname = "a, }b", perf_cpu_cycles = 18446744073709551615 }, { tid = 1, name = "systemd", vtids = [ [0] = 2673 ], p = 0xBF083A6C, r = -4 }"#;
        let mut t = TextLine::default();
        t.parse(l).unwrap();
        assert_eq!(t.ts_ns, 1_500_000_000);
        assert_eq!(t.context(l, b"tid"), Some(Value::Int(9)));
        assert_eq!(t.payload(l, b"tid"), Some(Value::Int(1)));
        assert_eq!(
            t.context(l, b"procname").and_then(|v| v.str(l)),
            Some(&b"a, }b"[..])
        );
        assert_eq!(
            t.context(l, b"perf_cpu_cycles"),
            Some(Value::UInt(u64::MAX))
        );
        assert_eq!(t.payload(l, b"p"), Some(Value::Int(0xBF08_3A6C)));
        assert_eq!(t.payload(l, b"r"), Some(Value::Int(-4)));
        assert_eq!(t.payload(l, b"vtids"), Some(Value::Other));
        assert_eq!(t.context_with_prefix(l, b"perf_").count(), 1);
    }

    #[test]
    fn malformed_lines_are_errors() {
        let mut t = TextLine::default();
        for l in [
            &b""[..],
            b"garbage",
            b"[1.2] h ev: { a = 1 ",
            b"[x] h ev: { a = 1 }",
            b"[1.2] h ev: { a = \"unterminated }",
            b"[1.2] h ev: { a = [ [0] = 1 }",
            b"[1.2] h ev:",
        ] {
            assert!(t.parse(l).is_err(), "{}", String::from_utf8_lossy(l));
        }
    }
}
