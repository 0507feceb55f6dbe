//! Events and packets the LTTng tracer discarded, as babeltrace2 reports them.
//!
//! LTTng's per-CPU ring buffers drop events when the consumer falls behind (the default
//! "discard" mode) and count them in the next packet's header. babeltrace2 does not put
//! that count in its text output: its `sink.text.pretty` prints a warning on **stderr**,
//! e.g. (babeltrace2 2.0.4, `--clock-seconds`):
//!
//! ```text
//! WARNING: Tracer discarded 7 events between [1457113582.918672632] and [1457113583.047299223] in trace "wilbrod" (UUID: …) within stream "…/channel0_0" (stream class ID: 0, stream ID: 0).
//! ```
//!
//! The surviving events look intact, so these lines are the only sign of the loss. Unread,
//! the engine would pair an entry before a gap with an exit after it (a "call" spanning
//! the loss) and the metrics would not show that anything was lost. The source turns each
//! report into a loss marker in the event stream and a `kernel_lost` drop count.
//!
//! stderr is read on its own thread ([`crate::sources::input::ChildOutput::spawn_tapped`])
//! while the reader parses stdout: reports cross over in a [`DiscardQueue`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// One discard report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Discard {
    /// Events the tracer discarded.
    pub events: u64,
    /// Whole packets lost (their event count is unknown).
    pub packets: u64,
    /// End of the range the loss happened in (ns, the trace clock), when known: the
    /// reader places the marker where the stream reaches it.
    pub end_ns: Option<u64>,
}

impl Discard {
    /// Two reports as one: what both lost, up to the later end (used when reports pile up).
    fn merge(self, other: Discard) -> Discard {
        Discard {
            events: self.events.saturating_add(other.events),
            packets: self.packets.saturating_add(other.packets),
            end_ns: match (self.end_ns, other.end_ns) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            },
        }
    }
}

/// The report on a babeltrace2 stderr line, if it is one. Colour codes, if any, are
/// skipped (the phrase is searched for, not expected at the start).
pub fn parse(line: &[u8]) -> Option<Discard> {
    const PHRASE: &[u8] = b"Tracer discarded ";
    let at = memchr::memmem::find(line, PHRASE)?;
    let rest = line.get(at + PHRASE.len()..)?;
    let digits = rest.iter().take_while(|c| c.is_ascii_digit()).count();
    let count: u64 = std::str::from_utf8(rest.get(..digits)?)
        .ok()?
        .parse()
        .ok()?;
    let rest = rest.get(digits..)?.strip_prefix(b" ")?;
    let mut d = Discard::default();
    if rest.starts_with(b"event") {
        d.events = count;
    } else if rest.starts_with(b"packet") {
        d.packets = count;
    } else {
        return None;
    }
    // "between [BEGIN] and [END]"; "(unknown time range)" leaves the end unknown.
    d.end_ns = memchr::memmem::find(rest, b"] and [")
        .and_then(|i| rest.get(i + 7..))
        .and_then(|end| end.get(..memchr::memchr(b']', end)?))
        .and_then(super::text::parse_seconds);
    Some(d)
}

/// Reports waiting beyond this many are merged into the last one: a tracer overrunning
/// all day cannot grow the queue, and no count is dropped.
pub const MAX_QUEUED: usize = 256;

/// Discard reports from the stderr thread to the reader.
#[derive(Debug, Default)]
pub struct DiscardQueue {
    /// Set when a report is queued: the reader's per-line check is one relaxed load.
    pending: AtomicBool,
    reports: Mutex<Vec<Discard>>,
}

impl DiscardQueue {
    /// Queues a report (merged into the last one beyond [`MAX_QUEUED`]).
    pub fn push(&self, d: Discard) {
        let mut q = self.reports.lock().unwrap_or_else(|e| e.into_inner());
        push_bounded(&mut q, d, MAX_QUEUED);
        self.pending.store(true, Ordering::Release);
    }

    /// The reports queued since the last take (none without a lock when nothing came).
    pub fn take(&self) -> Vec<Discard> {
        // A plain load first: the reader asks once per line, a swap each time would cost.
        if !self.pending.load(Ordering::Relaxed) || !self.pending.swap(false, Ordering::Acquire) {
            return Vec::new();
        }
        std::mem::take(&mut *self.reports.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Appends `d`, or merges it into the last report when `list` already holds `cap`.
pub fn push_bounded(list: &mut Vec<Discard>, d: Discard, cap: usize) {
    let full = list.len() >= cap;
    match list.last_mut() {
        Some(last) if full => *last = last.merge(d),
        _ => list.push(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_babeltrace2_event_and_packet_reports() {
        // As babeltrace2 2.0.4 prints it (a real trace, one packet counter raised).
        let line = b"WARNING: Tracer discarded 7 events between [1457113582.918672632] and [1457113583.047299223] in trace \"wilbrod\" (UUID: 69861fba-fe44-2b41-b75b-39acaf6930ec) within stream \"/tmp/t/channel0_0\" (stream class ID: 0, stream ID: 0).";
        assert_eq!(
            parse(line),
            Some(Discard {
                events: 7,
                packets: 0,
                end_ns: Some(1_457_113_583_047_299_223),
            })
        );
        let coloured = b"\x1b[33m\x1b[1mWARNING\x1b[0m\x1b[33m: Tracer discarded 1 packet (unknown time range) in trace \"h\" (no UUID) within stream \"s\" (stream class ID: 0, stream ID: 1).\x1b[0m";
        assert_eq!(
            parse(coloured),
            Some(Discard {
                events: 0,
                packets: 1,
                end_ns: None,
            })
        );
        for other in [
            &b"WARNING: Tracer discarded many events"[..],
            b"W 1 babeltrace2 log line about discarded events",
            b"",
            b"Tracer discarded 99999999999999999999999 events",
        ] {
            assert_eq!(parse(other), None, "{}", String::from_utf8_lossy(other));
        }
    }

    proptest::proptest! {
        /// Any stderr line: a report or none, never a panic; a report's count is the
        /// number written after the phrase.
        #[test]
        fn any_line_parses_without_panic(
            head in proptest::collection::vec(proptest::num::u8::ANY, 0..40),
            n in proptest::num::u64::ANY,
            unit in proptest::sample::select(vec!["events", "event", "packets", "apples"]),
            tail in proptest::collection::vec(proptest::num::u8::ANY, 0..80),
        ) {
            let mut line = head.clone();
            line.extend_from_slice(format!("Tracer discarded {n} {unit} between [").as_bytes());
            line.extend_from_slice(&tail);
            let _ = parse(&head);
            let _ = parse(&tail);
            match parse(&line) {
                Some(d) if unit.starts_with("event") => proptest::prop_assert_eq!(d.events, n),
                Some(d) if unit.starts_with("packet") => proptest::prop_assert_eq!(d.packets, n),
                Some(d) => proptest::prop_assert!(false, "{d:?} from unit {unit}"),
                None => proptest::prop_assert!(
                    unit == "apples" || memchr::memmem::find(&head, b"Tracer discarded ").is_some()
                ),
            }
        }
    }

    #[test]
    fn a_flood_of_reports_is_merged_not_dropped() {
        let q = DiscardQueue::default();
        assert!(q.take().is_empty());
        for i in 0..1000u64 {
            q.push(Discard {
                events: 2,
                packets: 0,
                end_ns: Some(1000 - i),
            });
        }
        let got = q.take();
        assert_eq!(got.len(), MAX_QUEUED);
        assert_eq!(got.iter().map(|d| d.events).sum::<u64>(), 2000);
        assert_eq!(
            got.last().and_then(|d| d.end_ns),
            Some(1000 - (MAX_QUEUED as u64 - 1))
        );
        assert!(q.take().is_empty());
    }
}
