//! One OTLP record (log record, span or flat JSON object) → one [`SyscallEvent`], following
//! the mapping in `docs/otlp-mapping.md`. Shared by every signal and encoding so they agree.

use std::fmt;

use faultline_engine::syscalls::Arch;
use faultline_engine::{PerfCounters, SyscallEvent, SyscallId};

use super::attributes::{AttrValue, Attrs, OtlpAttributeNames};

/// The time a record carries by itself, used when no `syscall.*_ns` attribute says better.
#[derive(Clone, Copy, Debug)]
pub(crate) enum RecordTime {
    /// A log record's timestamp (0 = absent): the call's entry time.
    Instant(u64),
    /// A span's start and end: the call's entry and exit.
    Span { start_ns: u64, end_ns: u64 },
}

/// What a record turned out to be.
#[derive(Debug, PartialEq)]
pub(crate) enum Mapped {
    Event(SyscallEvent),
    /// No syscall attribute: some other telemetry; dropped and counted, not an error.
    NotSyscall,
    /// A syscall record faultline cannot use; reported back as partial success.
    Rejected(RejectReason),
}

/// Why a syscall record was rejected (shown to the sender in `partial_success.error_message`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RejectReason {
    MissingThreadId(String),
    UnknownSyscallName(String),
    UnknownSyscallNumber(i64),
    UnknownArch(String),
    MissingDuration(String),
    MissingTime,
    ExitBeforeEnter,
    BadPhase(String),
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RejectReason::MissingThreadId(a) => {
                write!(f, "missing or non-integer thread id attribute `{a}`")
            }
            RejectReason::UnknownSyscallName(n) => write!(f, "unknown syscall name `{n}`"),
            RejectReason::UnknownSyscallNumber(n) => write!(f, "unknown syscall number {n}"),
            RejectReason::UnknownArch(a) => write!(f, "unknown syscall architecture `{a}`"),
            RejectReason::MissingDuration(a) => write!(
                f,
                "no duration: need `{a}`, enter+exit times, a span, or a phase attribute"
            ),
            RejectReason::MissingTime => write!(f, "record has no timestamp"),
            RejectReason::ExitBeforeEnter => write!(f, "exit time is before entry time"),
            RejectReason::BadPhase(p) => write!(f, "phase must be `enter` or `exit`, got `{p}`"),
        }
    }
}

/// Maps one record. `name_fallback` is a span's name, used when it names a syscall.
pub(crate) fn map_record<A: Attrs + ?Sized>(
    names: &OtlpAttributeNames,
    attrs: &A,
    time: RecordTime,
    name_fallback: Option<&str>,
) -> Mapped {
    let phase = attrs.get(&names.syscall_phase);
    let is_exit = phase.is_some_and(|p| p.as_str() == Some("exit"));
    let syscall = match syscall_id(names, attrs, name_fallback) {
        // A generic exit record (old LTTng `exit_syscall`): the engine's pairing names it.
        None if is_exit => SyscallId::UNKNOWN,
        None => return Mapped::NotSyscall,
        Some(Err(r)) => return Mapped::Rejected(r),
        Some(Ok(id)) => id,
    };
    let Some(tid) = attrs
        .get(&names.thread_id)
        .and_then(AttrValue::as_u64)
        .and_then(|t| u32::try_from(t).ok())
    else {
        return Mapped::Rejected(RejectReason::MissingThreadId(names.thread_id.clone()));
    };
    let pid = attrs
        .get(&names.process_pid)
        .and_then(AttrValue::as_u64)
        .and_then(|p| u32::try_from(p).ok())
        .unwrap_or(0);
    let ret = attrs.get(&names.syscall_ret).and_then(AttrValue::as_i64);
    let perf = perf_counters(names, attrs);
    let u = |key: &str| attrs.get(key).and_then(AttrValue::as_u64);
    let enter = u(&names.syscall_enter_ns);
    let exit = u(&names.syscall_exit_ns);
    let duration = u(&names.syscall_duration_ns);

    let mut event = if let Some(phase) = phase {
        let record_ns = match time {
            RecordTime::Instant(t) => t,
            RecordTime::Span { start_ns, .. } => start_ns,
        };
        match phase.as_str() {
            Some("enter") => match enter.or(nonzero(record_ns)) {
                Some(ts) => SyscallEvent::enter(pid, tid, syscall, ts),
                None => return Mapped::Rejected(RejectReason::MissingTime),
            },
            Some("exit") => match exit.or(nonzero(record_ns)) {
                Some(ts) => SyscallEvent::exit(pid, tid, syscall, ts, ret),
                None => return Mapped::Rejected(RejectReason::MissingTime),
            },
            other => {
                let shown = other.map_or_else(|| format!("{phase:?}"), str::to_string);
                return Mapped::Rejected(RejectReason::BadPhase(shown));
            }
        }
    } else {
        match complete_call(enter, exit, duration, time, &names.syscall_duration_ns) {
            Ok((start, dur)) => SyscallEvent::complete(pid, tid, syscall, start, dur),
            Err(r) => return Mapped::Rejected(r),
        }
    };
    event.ret = ret;
    event.perf = perf;
    Mapped::Event(event)
}

fn nonzero(ns: u64) -> Option<u64> {
    (ns != 0).then_some(ns)
}

/// Entry time and duration of a whole call, from the most explicit information present.
fn complete_call(
    enter: Option<u64>,
    exit: Option<u64>,
    duration: Option<u64>,
    time: RecordTime,
    duration_attr: &str,
) -> Result<(u64, u64), RejectReason> {
    match (enter, exit, duration) {
        (Some(e), Some(x), _) => x
            .checked_sub(e)
            .map(|d| (e, d))
            .ok_or(RejectReason::ExitBeforeEnter),
        (Some(e), None, Some(d)) => Ok((e, d)),
        (None, Some(x), Some(d)) => x
            .checked_sub(d)
            .map(|e| (e, d))
            .ok_or(RejectReason::ExitBeforeEnter),
        _ => match time {
            RecordTime::Span { start_ns, end_ns } => {
                let start = enter.unwrap_or(start_ns);
                let d = match duration {
                    Some(d) => d,
                    None => end_ns
                        .checked_sub(start)
                        .ok_or(RejectReason::ExitBeforeEnter)?,
                };
                nonzero(start)
                    .map(|s| (s, d))
                    .ok_or(RejectReason::MissingTime)
            }
            RecordTime::Instant(t) => match duration {
                Some(d) => nonzero(t).map(|t| (t, d)).ok_or(RejectReason::MissingTime),
                None => Err(RejectReason::MissingDuration(duration_attr.to_string())),
            },
        },
    }
}

/// `None` when the record names no syscall at all (not syscall telemetry).
fn syscall_id<A: Attrs + ?Sized>(
    names: &OtlpAttributeNames,
    attrs: &A,
    name_fallback: Option<&str>,
) -> Option<Result<SyscallId, RejectReason>> {
    if let Some(v) = attrs.get(&names.syscall_name) {
        let name = v.as_str().unwrap_or_default();
        let id = SyscallId::from_name(name);
        return Some(if id == SyscallId::UNKNOWN {
            Err(RejectReason::UnknownSyscallName(name.to_string()))
        } else {
            Ok(id)
        });
    }
    if let Some(v) = attrs.get(&names.syscall_nr) {
        let Some(nr) = v.as_i64() else {
            return Some(Err(RejectReason::UnknownSyscallName(format!("{v:?}"))));
        };
        let arch = match attrs
            .get(&names.syscall_arch)
            .and_then(|a| a.as_str().map(str::to_string))
        {
            None => Arch::X86_64,
            Some(a) => match a.as_str() {
                "x86_64" | "amd64" | "x86-64" => Arch::X86_64,
                "aarch64" | "arm64" => Arch::Aarch64,
                _ => return Some(Err(RejectReason::UnknownArch(a))),
            },
        };
        let id = u32::try_from(nr)
            .map(|n| SyscallId::from_number(arch, n))
            .unwrap_or(SyscallId::UNKNOWN);
        return Some(if id == SyscallId::UNKNOWN {
            Err(RejectReason::UnknownSyscallNumber(nr))
        } else {
            Ok(id)
        });
    }
    let id = SyscallId::from_name(name_fallback?);
    (id != SyscallId::UNKNOWN).then_some(Ok(id))
}

fn perf_counters<A: Attrs + ?Sized>(names: &OtlpAttributeNames, attrs: &A) -> Option<PerfCounters> {
    let u = |key: &str| attrs.get(key).and_then(AttrValue::as_u64);
    let fields = [
        u(&names.perf_cycles),
        u(&names.perf_instructions),
        u(&names.perf_cache_misses),
        u(&names.perf_context_switches),
    ];
    if fields.iter().all(Option::is_none) {
        return None;
    }
    let [cycles, instructions, cache_misses, context_switches] =
        fields.map(Option::unwrap_or_default);
    Some(PerfCounters {
        cycles,
        instructions,
        cache_misses,
        context_switches,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use faultline_engine::EventKind;
    use std::collections::HashMap;

    /// A plain map stands in for any attribute source in these unit tests.
    struct Map(HashMap<&'static str, AttrValue<'static>>);
    impl Attrs for Map {
        fn get(&self, key: &str) -> Option<AttrValue<'_>> {
            self.0.get(key).copied()
        }
    }
    fn map(kv: &[(&'static str, AttrValue<'static>)]) -> Map {
        Map(kv.iter().copied().collect())
    }
    fn names() -> OtlpAttributeNames {
        OtlpAttributeNames::default()
    }

    #[test]
    fn log_record_time_plus_duration_is_a_complete_call() {
        let a = map(&[
            ("syscall.name", AttrValue::Str("read")),
            ("thread.id", AttrValue::Int(42)),
            ("process.pid", AttrValue::Str("40")),
            ("syscall.duration_ns", AttrValue::Int(1500)),
            ("syscall.ret", AttrValue::Int(-11)),
        ]);
        let Mapped::Event(e) = map_record(&names(), &a, RecordTime::Instant(1_000), None) else {
            panic!("not an event");
        };
        assert_eq!(
            (e.pid, e.tid, e.ts_ns, e.duration_ns),
            (40, 42, 1_000, 1500)
        );
        assert_eq!(e.kind, EventKind::Complete);
        assert_eq!(e.syscall, SyscallId::from_name("read"));
        assert_eq!(e.ret, Some(-11));
        assert_eq!(e.perf, None);
    }

    #[test]
    fn enter_and_exit_attributes_win_over_the_record_time() {
        let a = map(&[
            ("syscall.name", AttrValue::Str("sys_write")),
            ("thread.id", AttrValue::Int(1)),
            ("syscall.enter_ns", AttrValue::Int(500)),
            ("syscall.exit_ns", AttrValue::Int(800)),
            ("perf.cycles", AttrValue::Int(9)),
        ]);
        let Mapped::Event(e) = map_record(&names(), &a, RecordTime::Instant(1_000), None) else {
            panic!("not an event");
        };
        assert_eq!((e.ts_ns, e.duration_ns), (500, 300));
        assert_eq!(e.syscall, SyscallId::from_name("write"));
        assert_eq!(e.perf.map(|p| (p.cycles, p.instructions)), Some((9, 0)));
    }

    #[test]
    fn span_times_give_the_call_and_span_name_can_name_it() {
        let a = map(&[("thread.id", AttrValue::Int(3))]);
        let t = RecordTime::Span {
            start_ns: 100,
            end_ns: 350,
        };
        let Mapped::Event(e) = map_record(&names(), &a, t, Some("futex")) else {
            panic!("not an event");
        };
        assert_eq!((e.ts_ns, e.duration_ns), (100, 250));
        assert_eq!(e.syscall, SyscallId::from_name("futex"));
        // A span whose name is no syscall is other telemetry.
        assert_eq!(
            map_record(&names(), &a, t, Some("GET /users")),
            Mapped::NotSyscall
        );
    }

    #[test]
    fn phases_give_enter_and_exit_halves() {
        let a = map(&[
            ("syscall.name", AttrValue::Str("read")),
            ("thread.id", AttrValue::Int(3)),
            ("syscall.phase", AttrValue::Str("exit")),
            ("syscall.ret", AttrValue::Int(8)),
        ]);
        let Mapped::Event(e) = map_record(&names(), &a, RecordTime::Instant(77), None) else {
            panic!("not an event");
        };
        assert_eq!((e.kind, e.ts_ns, e.ret), (EventKind::Exit, 77, Some(8)));
        // An exit record that names no call is still an exit; the engine pairs it by thread.
        let generic = map(&[
            ("thread.id", AttrValue::Int(3)),
            ("syscall.phase", AttrValue::Str("exit")),
        ]);
        let Mapped::Event(e) = map_record(&names(), &generic, RecordTime::Instant(78), None) else {
            panic!("not an event");
        };
        assert_eq!((e.kind, e.syscall), (EventKind::Exit, SyscallId::UNKNOWN));
    }

    #[test]
    fn records_without_a_syscall_are_not_syscalls_and_incomplete_ones_are_rejected() {
        let n = names();
        let t = RecordTime::Instant(10);
        assert_eq!(
            map_record(&n, &map(&[("thread.id", AttrValue::Int(1))]), t, None),
            Mapped::NotSyscall
        );
        let no_tid = map(&[
            ("syscall.name", AttrValue::Str("read")),
            ("syscall.duration_ns", AttrValue::Int(1)),
        ]);
        assert!(matches!(
            map_record(&n, &no_tid, t, None),
            Mapped::Rejected(RejectReason::MissingThreadId(_))
        ));
        let no_dur = map(&[
            ("syscall.name", AttrValue::Str("read")),
            ("thread.id", AttrValue::Int(1)),
        ]);
        assert!(matches!(
            map_record(&n, &no_dur, t, None),
            Mapped::Rejected(RejectReason::MissingDuration(_))
        ));
        let bad_name = map(&[
            ("syscall.name", AttrValue::Str("no_such_call")),
            ("thread.id", AttrValue::Int(1)),
        ]);
        assert!(matches!(
            map_record(&n, &bad_name, t, None),
            Mapped::Rejected(RejectReason::UnknownSyscallName(_))
        ));
        let backwards = map(&[
            ("syscall.name", AttrValue::Str("read")),
            ("thread.id", AttrValue::Int(1)),
            ("syscall.enter_ns", AttrValue::Int(9)),
            ("syscall.exit_ns", AttrValue::Int(8)),
        ]);
        assert_eq!(
            map_record(&n, &backwards, t, None),
            Mapped::Rejected(RejectReason::ExitBeforeEnter)
        );
        let no_time = map(&[
            ("syscall.name", AttrValue::Str("read")),
            ("thread.id", AttrValue::Int(1)),
            ("syscall.duration_ns", AttrValue::Int(1)),
        ]);
        assert_eq!(
            map_record(&n, &no_time, RecordTime::Instant(0), None),
            Mapped::Rejected(RejectReason::MissingTime)
        );
    }

    #[test]
    fn configured_names_are_used() {
        let n = OtlpAttributeNames {
            thread_id: "os.tid".into(),
            ..OtlpAttributeNames::default()
        };
        let a = map(&[
            ("syscall.name", AttrValue::Str("read")),
            ("os.tid", AttrValue::Int(5)),
            ("thread.id", AttrValue::Int(99)),
            ("syscall.duration_ns", AttrValue::Int(1)),
        ]);
        let Mapped::Event(e) = map_record(&n, &a, RecordTime::Instant(1), None) else {
            panic!("not an event");
        };
        assert_eq!(e.tid, 5);
    }
}
