//! The LTTng source on the two real shared traces, checked against babeltrace2's own output,
//! plus malformed inputs. Needs `babeltrace2` (a missing tool: skipped and recorded, or
//! failed under FAULTLINE_REQUIRE_TOOLS=1, see `prereq`) and the traces
//! (`wasm-guest/tests/common/traces.rs`: skipped loudly when missing, failed under FAULTLINE_REQUIRE_TRACES=1).

mod prereq;
#[path = "../../wasm-guest/tests/common/traces.rs"]
mod traces;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use faultline::model::EventBatch;
use faultline::pipeline::telemetry::{DropReason, SourceStats};
use faultline::sources::lttng::{self, LttngCounters, LttngTextReader};
use faultline::sources::{BatchReader, SourceError};
use faultline_engine::syscalls::Arch;
use faultline_engine::{EventKind, SyscallId};

/// babeltrace2's text of the trace `dir`; `None` when babeltrace2 is not installed.
fn babeltrace_text(dir: &Path) -> Option<String> {
    let out = Command::new("babeltrace2")
        .args(["--clock-seconds", "--no-delta"])
        .arg(dir)
        .output();
    match out {
        Ok(o) => {
            // The trace is there: babeltrace2 failing on it is a failure, not a skip.
            assert!(
                o.status.success(),
                "babeltrace2 cannot read {dir:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            Some(String::from_utf8(o.stdout).unwrap())
        }
        Err(e) => {
            prereq::missing_tool(&format!("babeltrace2 ({e})"), "apt-get install babeltrace2");
            None
        }
    }
}

fn trace(name: &str) -> Option<(std::path::PathBuf, String)> {
    let dir = traces::get(&format!("lttng/{name}"))?;
    babeltrace_text(&dir).map(|t| (dir, t))
}

fn drain(r: &mut dyn BatchReader) -> Result<Vec<EventBatch>, SourceError> {
    let mut out = Vec::new();
    while let Some(b) = r.next_batch()? {
        out.push(b);
    }
    Ok(out)
}

/// What babeltrace2's text says, counted with plain string handling (independent of the
/// reader): syscall records per (half, name), split by whether a `sched_switch` had been
/// seen on the record's CPU before it; and the scheduler records its switches make: one
/// `off_cpu` per switch away from a thread that made a syscall before (the thread a CPU
/// runs: neither trace has tid contexts), and one `on_cpu` when the CPU's previous switch
/// had brought that same thread in (its run is then known).
#[derive(Default, Debug)]
struct Expected {
    after_switch: BTreeMap<(&'static str, SyscallId), u64>,
    before_switch: u64,
    all_records: u64,
    switch_records: u64,
}

/// The number after `key = ` in a babeltrace2 line.
fn field(line: &str, key: &str) -> Option<u64> {
    line.split(&format!(" {key} = "))
        .nth(1)?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

fn expected(text: &str) -> Expected {
    let mut e = Expected::default();
    let mut switched: BTreeSet<String> = BTreeSet::new();
    let mut running: BTreeMap<String, u64> = BTreeMap::new();
    let mut syscalling: BTreeSet<u64> = BTreeSet::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (_ts, _host, event) = (words.next(), words.next(), words.next().unwrap());
        let event = event.trim_end_matches(':');
        let cpu = line
            .split("cpu_id = ")
            .nth(1)
            .unwrap()
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .to_string();
        if event == "sched_switch" {
            let prev = field(line, "prev_tid").unwrap();
            let next = field(line, "next_tid").unwrap();
            if prev != 0 && syscalling.contains(&prev) {
                e.switch_records += 1;
                *e.after_switch
                    .entry(("off_cpu", SyscallId::UNKNOWN))
                    .or_insert(0) += 1;
                if running.get(&cpu) == Some(&prev) {
                    *e.after_switch
                        .entry(("on_cpu", SyscallId::UNKNOWN))
                        .or_insert(0) += 1;
                }
            }
            running.insert(cpu.clone(), next);
            switched.insert(cpu);
            continue;
        }
        let event = event.strip_prefix("compat_").unwrap_or(event);
        let (half, name) = if let Some(n) = event.strip_prefix("syscall_entry_") {
            ("enter", n)
        } else if let Some(n) = event.strip_prefix("syscall_exit_") {
            ("exit", n)
        } else if event == "exit_syscall" {
            ("exit", "unknown")
        } else if let Some(n) = event.strip_prefix("sys_") {
            ("enter", n)
        } else {
            continue;
        };
        e.all_records += 1;
        if !switched.contains(&cpu) {
            e.before_switch += 1;
            continue;
        }
        if let Some(&tid) = running.get(&cpu) {
            syscalling.insert(tid);
        }
        let id = if name == "unknown" && half == "enter" {
            let nr: u32 = line
                .split(" id = ")
                .nth(1)
                .unwrap()
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .unwrap()
                .parse()
                .unwrap();
            SyscallId::from_number(Arch::X86_64, nr)
        } else if name == "unknown" {
            SyscallId::UNKNOWN
        } else {
            SyscallId::from_name(name)
        };
        *e.after_switch.entry((half, id)).or_insert(0) += 1;
    }
    e
}

fn emitted(batches: &[EventBatch]) -> BTreeMap<(&'static str, SyscallId), u64> {
    let mut m = BTreeMap::new();
    for e in batches.iter().flat_map(|b| &b.events) {
        let half = match e.kind {
            EventKind::Enter => "enter",
            EventKind::Exit => "exit",
            EventKind::Complete => "complete",
            EventKind::OnCpu => "on_cpu",
            EventKind::OffCpu => "off_cpu",
            EventKind::Lost => "lost",
            EventKind::Counters => "counters",
            EventKind::TcpSegments => "tcp_segments",
        };
        *m.entry((half, e.syscall)).or_insert(0) += 1;
    }
    m
}

/// Pairs halves per thread in stream order: (completed calls, exits whose named call differs
/// from the thread's pending entry — a wrong thread attribution shows up here).
fn pair(batches: &[EventBatch]) -> (u64, u64) {
    let mut pending: HashMap<u32, SyscallId> = HashMap::new();
    let (mut completed, mut mismatched) = (0, 0);
    for e in batches.iter().flat_map(|b| &b.events) {
        match e.kind {
            EventKind::Enter => {
                pending.insert(e.tid, e.syscall);
            }
            EventKind::Exit => {
                if let Some(entry) = pending.remove(&e.tid) {
                    completed += 1;
                    if e.syscall != SyscallId::UNKNOWN && e.syscall != entry {
                        mismatched += 1;
                    }
                }
            }
            EventKind::Complete
            | EventKind::OnCpu
            | EventKind::OffCpu
            | EventKind::Lost
            | EventKind::Counters
            | EventKind::TcpSegments => {}
        }
    }
    (completed, mismatched)
}

fn check_trace(name: &str) -> Option<(Vec<EventBatch>, LttngCounters, Expected)> {
    let (dir, text) = trace(name)?;
    let exp = expected(&text);

    // Through a real babeltrace2 child process, as in production.
    let stats = Arc::new(SourceStats::new("lttng"));
    let mut r = lttng::open(dir.to_str().unwrap(), Arch::X86_64, stats.clone()).unwrap();
    let batches = drain(&mut r).unwrap();
    let counters = r.counters();

    assert_eq!(
        stats.decode_errors(),
        0,
        "{name}: babeltrace2 text must parse"
    );
    assert_eq!(counters.syscall_records, exp.all_records, "{name}");
    // The principled difference: records before their CPU's first sched_switch have no
    // known thread; they are dropped as no_target, nothing else is.
    assert_eq!(counters.no_thread, exp.before_switch, "{name}");
    assert_eq!(counters.switch_records, exp.switch_records, "{name}");
    assert_eq!(stats.dropped(DropReason::NoTarget), exp.before_switch);
    assert_eq!(
        emitted(&batches),
        exp.after_switch,
        "{name}: per-syscall counts"
    );
    // Received counts every event handed on: the routable syscall halves and the
    // scheduler records.
    let scheduling: u64 = exp
        .after_switch
        .iter()
        .filter(|((h, _), _)| *h == "on_cpu" || *h == "off_cpu")
        .map(|(_, n)| n)
        .sum();
    assert_eq!(
        stats.received(),
        exp.all_records - exp.before_switch + scheduling,
        "{name}"
    );
    eprintln!(
        "{name}: {} syscall records, {} before the first sched_switch of their CPU",
        exp.all_records, exp.before_switch
    );
    Some((batches, counters, exp))
}

/// Entries of calls that return (`exit`/`exit_group` end the thread: no exit record).
fn returning_enters(exp: &Expected) -> u64 {
    let no_return = [
        SyscallId::from_name("exit"),
        SyscallId::from_name("exit_group"),
    ];
    exp.after_switch
        .iter()
        .filter(|((h, id), _)| *h == "enter" && !no_return.contains(id))
        .map(|(_, n)| n)
        .sum()
}

#[test]
fn many_threads_counts_equal_babeltrace2() {
    let Some((batches, _, exp)) = check_trace("many-threads") else {
        return;
    };
    let enters = returning_enters(&exp);
    let (completed, mismatched) = pair(&batches);
    // Thread recovery is right: every exit names the call its thread entered.
    assert_eq!(mismatched, 0);
    assert!(completed * 100 >= enters * 99, "{completed} of {enters}");

    // The traced program: one process, many threads, named from the fork/state-dump events.
    let multi: Vec<_> = batches
        .iter()
        .filter(|b| b.process.comm.as_deref() == Some("multithread"))
        .collect();
    assert!(!multi.is_empty());
    let pids: BTreeSet<_> = multi.iter().map(|b| b.process.pid).collect();
    let tids: BTreeSet<_> = multi
        .iter()
        .flat_map(|b| &b.events)
        .map(|e| e.tid)
        .collect();
    assert_eq!(pids.len(), 1, "{pids:?}");
    assert!(tids.len() > 10, "{} threads", tids.len());
}

#[test]
fn old_naming_trace_counts_equal_babeltrace2() {
    let Some((batches, _, exp)) = check_trace("bug446190") else {
        return;
    };
    // Old naming: every exit is the generic `exit_syscall`.
    assert!(exp
        .after_switch
        .keys()
        .filter(|(h, _)| *h == "exit")
        .all(|(_, id)| *id == SyscallId::UNKNOWN));
    let enters = returning_enters(&exp);
    let (completed, _) = pair(&batches);
    assert!(completed * 100 >= enters * 95, "{completed} of {enters}");
}

#[test]
fn garbage_lines_between_real_ones_are_counted() {
    let Some((_, text)) = trace("bug446190") else {
        return;
    };
    let mut mixed = String::new();
    let mut injected = 0;
    for (i, line) in text.lines().take(5000).enumerate() {
        if i % 100 == 7 {
            mixed.push_str(&line[..line.len() / 2]);
            mixed.push('\n');
            injected += 1;
        }
        mixed.push_str(line);
        mixed.push('\n');
    }
    mixed.push_str("[1.0] h event_without_fields:\n{ } }} [[\n");
    let stats = Arc::new(SourceStats::new("lttng"));
    let mut r = LttngTextReader::new(mixed.as_bytes(), Arch::X86_64, stats.clone());
    drain(&mut r).unwrap();
    // Half lines are malformed unless the cut happened to fall between two field groups.
    assert!(stats.decode_errors() >= injected * 9 / 10 + 2);
    assert!(stats.decode_errors() <= injected + 2);
}

#[test]
fn broken_inputs_give_clear_errors() {
    let stats = Arc::new(SourceStats::new("lttng"));
    // Not a directory.
    let err = lttng::open("/etc/hostname", Arch::X86_64, stats.clone())
        .err()
        .unwrap();
    assert!(err.to_string().contains("not a directory"), "{err}");

    // A directory without a trace: babeltrace2 fails; its reason reaches the error.
    let empty = tempfile::tempdir().unwrap();
    // Without babeltrace2 the open itself fails, naming it.
    match lttng::open(empty.path().to_str().unwrap(), Arch::X86_64, stats.clone()) {
        Ok(mut r) => {
            let err = drain(&mut r).unwrap_err().to_string();
            assert!(err.contains("babeltrace2 failed"), "{err}");
            assert!(
                err.contains("No trace was found") || err.contains("ERROR"),
                "{err}"
            );
        }
        Err(e) => {
            let err = e.to_string();
            assert!(err.contains("babeltrace2"), "{err}");
            prereq::missing_tool(
                &format!("babeltrace2 (its errors on an empty directory unchecked: {err})"),
                "apt-get install babeltrace2",
            );
            return;
        }
    }

    // A truncated CTF trace (a stream file cut short).
    let Some(src) = traces::get("lttng/bug446190") else {
        return;
    };
    let cut = writable_copy(&src);
    let stream = cut.path().join("channel0_0");
    let len = std::fs::metadata(&stream).unwrap().len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&stream)
        .unwrap();
    f.set_len(len / 3).unwrap();
    let mut r = lttng::open(cut.path().to_str().unwrap(), Arch::X86_64, stats).unwrap();
    let err = drain(&mut r).unwrap_err().to_string();
    assert!(err.contains("babeltrace2 failed"), "{err}");
}

#[test]
fn tiny_buffers_and_live_mode_decode_the_same_calls() {
    let Some((_, text)) = trace("bug446190") else {
        return;
    };
    let read = |cap: usize, live: bool| {
        let stats = Arc::new(SourceStats::new("lttng"));
        let input = std::io::BufReader::with_capacity(cap, text.as_bytes());
        let r = LttngTextReader::new(input, Arch::X86_64, stats.clone());
        let mut r = if live { r.live() } else { r };
        let batches = drain(&mut r).unwrap();
        assert_eq!(stats.decode_errors(), 0);
        assert_eq!(r.bytes_read(), text.len() as u64);
        (emitted(&batches), batches.len())
    };
    let (whole, n_whole) = read(1 << 16, false);
    let (small, _) = read(37, false);
    let (live, n_live) = read(200, true);
    assert_eq!(whole, small);
    assert_eq!(whole, live);
    // Live mode hands over what has arrived instead of filling batches.
    assert!(n_live > n_whole * 5, "{n_live} vs {n_whole}");
}

#[test]
fn open_trace_recognises_directories_and_saved_text() {
    let Some((dir, text)) = trace("bug446190") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let saved = tmp.path().join("bt.txt.zst");
    std::fs::write(&saved, zstd::encode_all(text.as_bytes(), 3).unwrap()).unwrap();
    let count = |p: &Path| {
        let stats = Arc::new(SourceStats::new("lttng"));
        let mut r = faultline::sources::input::open_trace(p, Arch::X86_64, stats.clone()).unwrap();
        emitted(&drain(&mut *r).unwrap())
    };
    let from_dir = count(&dir);
    assert!(!from_dir.is_empty());
    assert_eq!(from_dir, count(&saved));
}

/// The files of trace directory `src` (not its `index/`), copied writable into a new
/// temporary directory (the shared traces are read-only).
fn writable_copy(src: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(src).unwrap() {
        let p = entry.unwrap().path();
        if p.is_file() {
            let to = dir.path().join(p.file_name().unwrap());
            std::fs::copy(&p, &to).unwrap();
            let mut perm = std::fs::metadata(&to).unwrap().permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            perm.set_readonly(false);
            std::fs::set_permissions(&to, perm).unwrap();
        }
    }
    dir
}

/// Raises the tracer's cumulative `events_discarded` counter of stream `file` by `extra`
/// from packet `from` on, as LTTng's ring buffer does after an overrun. The packet layout
/// is the one the trace's metadata declares (checked): a 32-byte header (magic, uuid,
/// stream id, instance id), then the context's timestamps, sizes, sequence number and
/// `unsigned long events_discarded` (64-bit) at byte 72.
fn raise_discards(dir: &Path, file: &str, from: usize, extra: u64) {
    let meta = std::fs::read(dir.join("metadata")).unwrap();
    let meta = String::from_utf8_lossy(&meta);
    for declared in [
        "uint64_t stream_instance_id;",
        "uint64_t packet_seq_num;\n\tunsigned long events_discarded;",
        "typealias integer { size = 64; align = 8; signed = false; } := unsigned long;",
    ] {
        assert!(meta.contains(declared), "metadata lacks {declared:?}");
    }
    let path = dir.join(file);
    let mut b = std::fs::read(&path).unwrap();
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let (mut off, mut packet) = (0usize, 0usize);
    while off < b.len() {
        assert_eq!(
            &b[off..off + 4],
            &0xC1FC_1FC1u32.to_le_bytes(),
            "packet magic"
        );
        let size = usize::try_from(u64_at(&b, off + 56) / 8).unwrap();
        if packet >= from {
            let now = u64_at(&b, off + 72);
            b[off + 72..off + 80].copy_from_slice(&(now + extra).to_le_bytes());
        }
        off += size;
        packet += 1;
    }
    assert!(packet > from, "{file} has only {packet} packets");
    std::fs::write(&path, b).unwrap();
}

/// A real trace whose tracer discarded events: babeltrace2 reports them on stderr only.
/// They must become `kernel_lost` counts and loss markers, and nothing else may change.
#[test]
fn tracer_discards_become_loss_markers_and_kernel_lost_counts() {
    let Some((src, text)) = trace("many-threads") else {
        return;
    };
    // Not the index: it caches each packet's counters; babeltrace2 rebuilds it.
    let dir = writable_copy(&src);
    raise_discards(dir.path(), "channel0_0", 1, 7);
    raise_discards(dir.path(), "channel0_3", 2, 5);

    // What babeltrace2 itself says, read with plain string handling: the count after
    // "discarded" and the end of each range.
    let out = Command::new("babeltrace2")
        .args(["--clock-seconds", "--no-delta"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        text,
        "discards change no event"
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    let reports: Vec<(u64, u64)> = stderr
        .lines()
        .filter(|l| l.contains("Tracer discarded"))
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let n: u64 = words[3].parse().unwrap();
            let end = l
                .split("] and [")
                .nth(1)
                .unwrap()
                .split(']')
                .next()
                .unwrap();
            let (s, ns) = end.split_once('.').unwrap();
            (
                n,
                s.parse::<u64>().unwrap() * 1_000_000_000 + ns.parse::<u64>().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        reports.iter().map(|r| r.0).collect::<Vec<_>>(),
        vec![7, 5],
        "{stderr}"
    );

    let stats = Arc::new(SourceStats::new("lttng"));
    let mut r = lttng::open(dir.path().to_str().unwrap(), Arch::X86_64, stats.clone()).unwrap();
    let batches = drain(&mut r).unwrap();
    let c = r.counters();
    assert_eq!((c.discarded_events, c.discarded_packets), (12, 0));
    assert_eq!(stats.dropped(DropReason::KernelLost), 12);

    // Every event of the clean trace is still there, plus the markers.
    let exp = expected(&text);
    let mut got = emitted(&batches);
    let n_markers = got.remove(&("lost", SyscallId::UNKNOWN)).unwrap_or(0);
    assert_eq!(got, exp.after_switch);
    let markers: Vec<u64> = batches
        .iter()
        .flat_map(|b| b.events.iter())
        .filter(|e| e.kind == EventKind::Lost)
        .map(|e| e.ts_ns)
        .collect();
    assert_eq!(markers.len() as u64, n_markers);
    let events: u64 = batches.iter().map(|b| b.events.len() as u64).sum();
    assert_eq!(stats.received(), events);
    // Each report marks the processes with events since the last marker, at the end of
    // its range (or, if babeltrace2's stderr came late, at the latest event then: never
    // more than a second after).
    for (_, end) in &reports {
        let at: Vec<u64> = markers
            .iter()
            .copied()
            .filter(|&t| t >= *end && t <= end + 1_000_000_000)
            .collect();
        assert!(
            !at.is_empty(),
            "no marker for the range ending at {end}: {markers:?}"
        );
    }
    assert!(markers.iter().all(|t| reports
        .iter()
        .any(|(_, end)| *t >= *end && *t <= end + 1_000_000_000)));
    eprintln!(
        "discards: {} markers for {} reports, at {:?} (range ends {:?})",
        markers.len(),
        reports.len(),
        markers.iter().collect::<BTreeSet<_>>(),
        reports.iter().map(|r| r.1).collect::<Vec<_>>()
    );
}
