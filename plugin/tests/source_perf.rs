//! The perf sources on real data: fixture lines cut from the shared MariaDB traces, captures
//! of real processes made with the real `perf`, and malformed input.

mod perf_support;
mod prereq;
use perf_support::perf_usable;
use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use faultline::model::EventBatch;
use faultline::pipeline::telemetry::{DropReason, SourceStats};
use faultline::sources::perf::live::{
    spawn_script, spawn_script_with, spawn_trace, PerfTarget, RecordOptions,
};
use faultline::sources::perf::{PerfScriptReader, PerfTraceReader};
use faultline::sources::{BatchReader, MAX_BATCH_EVENTS};
use faultline_engine::syscalls::Arch;
use faultline_engine::{Engine, EventKind, Params, SyscallEvent, SyscallId};
use proptest::prelude::*;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn drain(reader: &mut dyn BatchReader) -> Vec<EventBatch> {
    let mut out = Vec::new();
    while let Some(b) = reader.next_batch().expect("read") {
        assert!(!b.events.is_empty() && b.events.len() <= MAX_BATCH_EVENTS);
        out.push(b);
    }
    out
}

/// Trace events in `batches` (not the loss markers the reader adds).
fn traced(batches: &[EventBatch]) -> u64 {
    batches
        .iter()
        .flat_map(|b| &b.events)
        .filter(|e| e.kind != EventKind::Lost)
        .count() as u64
}

/// Loss markers in `batches`.
fn markers(batches: &[EventBatch]) -> u64 {
    batches
        .iter()
        .flat_map(|b| &b.events)
        .filter(|e| e.kind == EventKind::Lost)
        .count() as u64
}

fn read_script(path: &Path) -> (Vec<EventBatch>, Arc<SourceStats>) {
    let stats = Arc::new(SourceStats::new("perf"));
    let mut r = PerfScriptReader::open(path, Arch::X86_64, stats.clone()).expect("open");
    (drain(&mut r), stats)
}

/// Independent count of the text: (tid, "enter"/"exit", NR) → lines, by plain string splitting.
fn text_counts(text: &str) -> BTreeMap<(u32, &'static str, i64), u64> {
    let mut m = BTreeMap::new();
    for line in text.lines() {
        let half = if line.contains("raw_syscalls:sys_enter:") {
            "enter"
        } else if line.contains("raw_syscalls:sys_exit:") {
            "exit"
        } else {
            continue;
        };
        let words: Vec<&str> = line.split_whitespace().collect();
        let nr_at = words.iter().position(|w| *w == "NR").unwrap();
        let nr: i64 = words[nr_at + 1].parse().unwrap();
        // The thread token is the one right after the command name (`pid/tid` or `tid`).
        let thread = words
            .iter()
            .find(|w| w.chars().all(|c| c.is_ascii_digit() || c == '/') && !w.is_empty())
            .unwrap();
        let tid: u32 = thread.rsplit('/').next().unwrap().parse().unwrap();
        *m.entry((tid, half, nr)).or_insert(0) += 1;
    }
    m
}

fn event_counts(batches: &[EventBatch]) -> BTreeMap<(u32, &'static str, SyscallId), u64> {
    let mut m = BTreeMap::new();
    for b in batches {
        for e in &b.events {
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
            *m.entry((e.tid, half, e.syscall)).or_insert(0) += 1;
        }
    }
    m
}

fn to_ids(
    m: BTreeMap<(u32, &'static str, i64), u64>,
) -> BTreeMap<(u32, &'static str, SyscallId), u64> {
    let mut out = BTreeMap::new();
    for ((tid, half, nr), n) in m {
        // perf prints NR -1 for calls the kernel could not number (e.g. a restart).
        let id = u32::try_from(nr).map_or(SyscallId::UNKNOWN, |nr| {
            SyscallId::from_number(Arch::X86_64, nr)
        });
        *out.entry((tid, half, id)).or_insert(0) += n;
    }
    out
}

#[test]
fn mariadb_fixture_decodes_every_line() {
    let path = data("perf_script_mariadb.txt");
    let text = std::fs::read_to_string(&path).unwrap();
    let (batches, stats) = read_script(&path);
    assert_eq!(stats.decode_errors(), 0);
    assert_eq!(stats.received(), text.lines().count() as u64);
    assert_eq!(event_counts(&batches), to_ids(text_counts(&text)));
    for b in &batches {
        assert_eq!(b.source, "perf");
        assert_eq!(b.process.pid, Some(14397));
        assert_eq!(b.process.comm.as_deref(), Some("mariadbd"));
        assert!(b.events.iter().all(|e| e.pid == 14397));
    }
    // Per-thread order is the file's order (timestamps never go back within a thread).
    let mut last: BTreeMap<u32, u64> = BTreeMap::new();
    for e in batches.iter().flat_map(|b| &b.events) {
        let prev = last.insert(e.tid, e.ts_ns).unwrap_or(0);
        assert!(e.ts_ns >= prev, "thread {} went back in time", e.tid);
    }
    // Known values from the first line of the fixture, read independently.
    let first = text.lines().next().unwrap();
    let ts: f64 = first
        .split_whitespace()
        .nth(2)
        .unwrap()
        .trim_end_matches(':')
        .parse()
        .unwrap();
    let first_ev = batches.iter().flat_map(|b| &b.events).next().unwrap();
    assert!((first_ev.ts_ns as f64 / 1e9 - ts).abs() < 1e-6);
}

#[test]
fn default_and_compact_field_sets_give_the_same_calls() {
    let compact_text = std::fs::read_to_string(data("perf_script_compact_sh.txt")).unwrap();
    let (compact, s1) = read_script(&data("perf_script_compact_sh.txt"));
    let (default, s2) = read_script(&data("perf_script_default_sh.txt"));
    assert_eq!((s1.decode_errors(), s2.decode_errors()), (0, 0));
    assert_eq!(event_counts(&compact), event_counts(&default));
    assert_eq!(event_counts(&compact), to_ids(text_counts(&compact_text)));

    // Compact: batches per process id; exec renames the process (sh → echo, sh → true).
    let pids: BTreeSet<u32> = compact.iter().filter_map(|b| b.process.pid).collect();
    assert_eq!(pids.len(), 3, "sh and its two children");
    let names: BTreeSet<&str> = compact
        .iter()
        .filter_map(|b| b.process.comm.as_deref())
        .collect();
    assert_eq!(names, BTreeSet::from(["echo", "sh", "true"]));
    for b in &compact {
        assert!(b.events.iter().all(|e| Some(e.pid) == b.process.pid));
    }
    // Default field set: no pid, grouped by command name, pid = tid in events.
    assert!(default.iter().all(|b| b.process.pid.is_none()));
    assert!(default
        .iter()
        .flat_map(|b| &b.events)
        .all(|e| e.pid == e.tid));
}

#[test]
fn perf_trace_fixture_gives_complete_calls() {
    let path = data("perf_trace_sh.txt");
    let text = std::fs::read_to_string(&path).unwrap();
    let stats = Arc::new(SourceStats::new("perf"));
    let mut r = PerfTraceReader::new(
        std::io::BufReader::new(std::fs::File::open(&path).unwrap()),
        stats.clone(),
    );
    let batches = drain(&mut r);
    assert_eq!(stats.decode_errors(), 0);
    // Finished calls: lines with an entry time and a result (`= ...`).
    let finished = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('?') && l.contains(" = "))
        .count() as u64;
    assert_eq!(stats.received(), finished);
    let events: Vec<_> = batches.iter().flat_map(|b| &b.events).collect();
    assert!(events.iter().all(|e| e.kind == EventKind::Complete));
    // `sleep 0.1` shows as one clock_nanosleep of about 100 ms.
    let nanosleep = SyscallId::from_name("clock_nanosleep");
    let sleeps: Vec<_> = events.iter().filter(|e| e.syscall == nanosleep).collect();
    assert_eq!(sleeps.len(), 1);
    assert!((100_000_000..110_000_000).contains(&sleeps[0].duration_ns));
    let comms: BTreeSet<_> = batches
        .iter()
        .filter_map(|b| b.process.comm.clone())
        .collect();
    assert!(comms.contains("sleep") && comms.contains("sh"), "{comms:?}");
}

#[test]
fn garbage_lines_are_counted_and_skipped() {
    let text = std::fs::read_to_string(data("perf_script_mariadb.txt")).unwrap();
    let garbage = [
        "this is not perf output",
        "        mariadbd 14397/14433  3311.29: raw_syscalls:sys_exit: NR 45 = ",
        "        mariadbd 14397/x  3311.292880984: raw_syscalls:sys_enter: NR 45 (1)",
        "\u{fffd}\u{0}\u{7f}",
    ];
    let mut mixed = String::new();
    for (i, line) in text.lines().enumerate() {
        mixed.push_str(line);
        mixed.push('\n');
        if i % 50 == 0 {
            mixed.push_str(garbage[i / 50 % garbage.len()]);
            mixed.push('\n');
        }
    }
    let injected = text.lines().count().div_ceil(50) as u64;
    let stats = Arc::new(SourceStats::new("perf"));
    let mut r = PerfScriptReader::new(mixed.as_bytes(), Arch::X86_64, stats.clone());
    let batches = drain(&mut r);
    assert_eq!(stats.decode_errors(), injected);
    assert_eq!(event_counts(&batches), to_ids(text_counts(&text)));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let stats = Arc::new(SourceStats::new("perf"));
        let mut r = PerfScriptReader::new(&bytes[..], Arch::X86_64, stats.clone());
        let lines = bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()).count() as u64;
        let mut events = 0u64;
        while let Some(b) = r.next_batch().unwrap() {
            events += b.events.len() as u64;
        }
        prop_assert!(stats.decode_errors() + events <= lines);
        let stats = Arc::new(SourceStats::new("perf"));
        let mut t = PerfTraceReader::new(&bytes[..], stats);
        while t.next_batch().unwrap().is_some() {}
    }

    #[test]
    fn mutated_real_lines_never_panic(cut in 0usize..120, junk in "[ !$-9;-~]{0,12}") {
        let text = std::fs::read_to_string(data("perf_script_mariadb.txt")).unwrap();
        let mut mutated = String::new();
        for line in text.lines().take(40) {
            let at = line.char_indices().map(|(i, _)| i).nth(cut).unwrap_or(line.len());
            mutated.push_str(&line[..at]);
            mutated.push_str(&junk);
            mutated.push('\n');
        }
        let stats = Arc::new(SourceStats::new("perf"));
        let mut r = PerfScriptReader::new(mutated.as_bytes(), Arch::X86_64, stats.clone());
        let mut events = 0u64;
        while let Some(b) = r.next_batch().unwrap() {
            events += b.events.len() as u64;
        }
        // Blank lines are skipped, every other line is an event or a counted error.
        let blank = mutated.lines().filter(|l| l.trim().is_empty()).count() as u64;
        prop_assert_eq!(events + stats.decode_errors(), 40 - blank);
    }
}

const DD_BYTES: u32 = 3000;

fn dd_args() -> Vec<String> {
    [
        "dd",
        "if=/dev/zero",
        "of=/dev/null",
        "bs=1",
        &format!("count={DD_BYTES}"),
    ]
    .map(String::from)
    .to_vec()
}

#[test]
fn real_perf_capture_matches_perf_script_text() {
    if !perf_usable() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data_file = dir.path().join("perf.data");
    let status = Command::new("perf")
        .args([
            "record",
            "-q",
            "-e",
            "raw_syscalls:sys_enter",
            "-e",
            "raw_syscalls:sys_exit",
        ])
        // 4 MiB per CPU holds the whole capture: nothing is lost even if the machine is busy.
        .args(["-m", "1024", "-k", "CLOCK_MONOTONIC", "-o"])
        .arg(&data_file)
        .arg("--")
        .args(dd_args())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let script = Command::new("perf")
        .args([
            "script",
            "--ns",
            "-F",
            "comm,pid,tid,time,event,trace",
            "-i",
        ])
        .arg(&data_file)
        .output()
        .unwrap();
    assert!(script.status.success());
    let text = String::from_utf8(script.stdout).unwrap();
    let text_path = dir.path().join("trace.txt");
    std::fs::write(&text_path, &text).unwrap();

    let (batches, stats) = read_script(&text_path);
    assert_eq!(stats.decode_errors(), 0);
    assert_eq!(event_counts(&batches), to_ids(text_counts(&text)));

    // dd copies byte by byte: one read(0) and one write(1) per byte, plus its startup.
    let read = SyscallId::from_name("read");
    let write = SyscallId::from_name("write");
    let dd = batches
        .iter()
        .filter(|b| b.process.comm.as_deref() == Some("dd"));
    let count = |id| {
        dd.clone()
            .flat_map(|b| &b.events)
            .filter(|e| e.syscall == id && e.kind == EventKind::Enter)
            .count() as u32
    };
    let (reads, writes) = (count(read), count(write));
    assert!((DD_BYTES..DD_BYTES + 20).contains(&reads), "reads {reads}");
    assert!(
        (DD_BYTES..DD_BYTES + 20).contains(&writes),
        "writes {writes}"
    );
    // The same number as a plain grep of the perf text for `sys_enter: NR 0 ` lines.
    let grep = text
        .lines()
        .filter(|l| l.contains(" dd ") || l.trim_start().starts_with("dd "))
        .filter(|l| l.contains("sys_enter: NR 0 "))
        .count() as u32;
    assert_eq!(reads, grep);
}

#[test]
fn live_perf_record_pipe_streams_a_command() {
    if !perf_usable() {
        return;
    }
    let stats = Arc::new(SourceStats::new("perf"));
    // dd under a shell that waits for it: the shell forks (dd is not its last command)
    // and sleeps in wait4 while dd runs, a switch away that is always recorded. dd's own
    // switches are not certain: it never blocks, and perf stops following a task in
    // do_exit, before its last switch. Nor is its on-CPU time: the kernel accounts a
    // running task at each scheduler tick and when it leaves the CPU, and dd may exit
    // within one tick (1 run in 15 alone). So the shell then spins ~70 ms, many ticks.
    let shell = vec![
        "sh".to_string(),
        "-c".to_string(),
        format!(
            "{}; i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; true",
            dd_args().join(" ")
        ),
    ];
    let mut r =
        spawn_script(&PerfTarget::Command(shell), Arch::X86_64, stats.clone()).expect("spawn perf");
    let batches = drain(&mut r);
    assert_eq!(stats.decode_errors(), 0);
    let write = SyscallId::from_name("write");
    let writes = batches
        .iter()
        .filter(|b| b.process.comm.as_deref() == Some("dd"))
        .flat_map(|b| &b.events)
        .filter(|e| e.syscall == write && e.kind == EventKind::Exit && e.ret == Some(1))
        .count() as u32;
    // Every 1-byte write of dd with its return value (nothing lost in the pipe), plus at
    // most a few other 1-byte writes of its startup.
    assert!(
        (DD_BYTES..DD_BYTES + 5).contains(&writes),
        "writes {writes}"
    );
    assert_eq!(stats.dropped(DropReason::KernelLost), 0);
    // The scheduler's account of the shell's CPU time rides along when the kernel has it.
    let on_cpu_ns: u64 = batches
        .iter()
        .filter(|b| b.process.comm.as_deref() == Some("sh"))
        .flat_map(|b| &b.events)
        .filter(|e| e.kind == EventKind::OnCpu)
        .map(|e| e.duration_ns)
        .sum();
    if std::path::Path::new("/sys/kernel/tracing/events/sched/sched_stat_runtime").exists() {
        // At least the spin, give or take the ticks at its ends.
        assert!(
            on_cpu_ns > 20_000_000,
            "{on_cpu_ns} ns of on-CPU time recorded for the shell"
        );
    }
    // So do switches away from the CPU: the shell's, blocked in wait4 for dd.
    let off_cpu = batches
        .iter()
        .filter(|b| b.process.comm.as_deref() == Some("sh"))
        .flat_map(|b| &b.events)
        .filter(|e| e.kind == EventKind::OffCpu && !e.preempted())
        .count();
    if std::path::Path::new("/sys/kernel/tracing/events/sched/sched_switch").exists() {
        assert!(off_cpu > 0, "no blocking switch recorded for the shell");
    }
}

/// One `getsid` call of a live capture: when it was made (its record's own timestamp, in
/// perf's clock) and when it arrived here (after the capture's start, in this process's).
#[derive(Clone, Copy, Debug)]
struct Arrival {
    made_ns: u64,
    arrived: Duration,
}

/// The `getsid` calls of a live capture of `argv`, in arrival order.
fn getsid_arrivals(argv: &[&str], flush_every: Option<Duration>) -> Vec<Arrival> {
    let stats = Arc::new(SourceStats::new("perf"));
    let start = std::time::Instant::now();
    let opts = RecordOptions {
        flush_every,
        ..RecordOptions::default()
    };
    let argv = argv.iter().map(|a| a.to_string()).collect();
    let mut r = spawn_script_with(&PerfTarget::Command(argv), Arch::X86_64, stats, opts)
        .expect("spawn perf");
    let getsid = SyscallId::from_name("getsid");
    let mut arrivals = Vec::new();
    while let Some(b) = r.next_batch().expect("read") {
        let arrived = start.elapsed();
        arrivals.extend(
            b.events
                .iter()
                .filter(|e| e.syscall == getsid && e.kind == EventKind::Exit)
                .map(|e| Arrival {
                    made_ns: e.ts_ns,
                    arrived,
                }),
        );
    }
    arrivals
}

/// Each call's delivery lag: how much longer than the fastest call of the run it took from
/// being made to arriving, with its time of making in the arrival clock (as late as the
/// fastest call's delivery allows). The two clocks differ by a constant, which this
/// cancels; so does a slow start of perf, which only delays the first calls.
fn lags(arrivals: &[Arrival]) -> Vec<(Duration, Duration)> {
    let delay = |a: &Arrival| a.arrived.as_nanos() as i128 - i128::from(a.made_ns);
    let fastest = arrivals.iter().map(delay).min().unwrap_or(0);
    arrivals
        .iter()
        .map(|a| {
            let made = i128::from(a.made_ns) + fastest;
            let ns = |v: i128| Duration::from_nanos(u64::try_from(v.max(0)).unwrap_or(u64::MAX));
            (ns(made), ns(delay(a) - fastest))
        })
        .collect()
}

/// A quiet service (20 short wakeups a second, for 12 s) is seen within seconds: perf is
/// told every second to hand over what its buffers hold. Left to its own wakeups (half of
/// a CPU's 4 MiB buffer full), its calls arrive when it exits, but for those perf happens
/// to read while the service starts. Latency is measured per call, from the records' own
/// timestamps against their arrival (see [`lags`]), and only for calls made once the
/// capture delivered its first: perf and perf script starting slowly (a loaded machine,
/// seconds) delay the calls made meanwhile, not the delivery this checks.
#[test]
fn live_perf_delivers_a_quiet_targets_calls_within_seconds() {
    if !perf_usable() {
        return;
    }
    if Command::new("python3").args(["-c", ""]).status().is_err() {
        prereq::missing_tool(
            "python3 (plays the quiet service)",
            "apt-get install python3",
        );
        return;
    }
    let quiet = [
        "python3",
        "-c",
        "import os, time\nfor _ in range(240):\n    os.getsid(0)\n    time.sleep(0.05)",
    ];
    // Side by side, so both see the same machine.
    let unflushed = std::thread::spawn(move || getsid_arrivals(&quiet, None));
    let flushed = getsid_arrivals(&quiet, RecordOptions::default().flush_every);
    let unflushed = unflushed.join().expect("no panic");
    // Every call of the loop, in both: nothing lost.
    assert_eq!((flushed.len(), unflushed.len()), (240, 240));

    let (flushed_lags, unflushed_lags) = (lags(&flushed), lags(&unflushed));
    let first = flushed.iter().map(|a| a.arrived).min().expect("arrivals");
    // The calls made once the flushed capture had delivered its first.
    let steady: Vec<Duration> = flushed_lags
        .iter()
        .filter(|(made, _)| *made >= first)
        .map(|(_, lag)| *lag)
        .collect();
    let worst = |l: &[Duration]| l.iter().copied().max().unwrap_or_default();
    let unflushed_worst = worst(&unflushed_lags.iter().map(|(_, l)| *l).collect::<Vec<_>>());
    eprintln!(
        "flushed: first arrival after {first:.1?}, {} calls made after it, worst lag {:.1?} \
         (of all {:.1?}); unflushed: worst lag {unflushed_worst:.1?}",
        steady.len(),
        worst(&steady),
        worst(&flushed_lags.iter().map(|(_, l)| *l).collect::<Vec<_>>()),
    );
    // The flushed capture delivers while the service runs, not at its exit: at least a
    // third of its calls (4 s of 12) were made after the first arrival...
    assert!(
        steady.len() >= 80,
        "only {} calls made after the first arrival at {first:.1?}: {flushed:?}",
        steady.len()
    );
    // ...and each of those arrived at most 4 s later than the fastest call (a ping a
    // second, perf script's ordering round and output buffer: about 2 s here, idle or
    // loaded).
    assert!(
        worst(&steady) <= Duration::from_secs(4),
        "worst lag {:.1?}: {flushed_lags:.1?}",
        worst(&steady)
    );
    // Without the flush they wait: mostly all until the service's exit (13 s), but for a
    // few perf read while the service started.
    assert!(
        unflushed_worst > worst(&steady),
        "unflushed {unflushed_lags:.1?} against flushed {flushed_lags:.1?}"
    );
}

fn dd_of(bytes: u32) -> Vec<String> {
    [
        "dd",
        "if=/dev/zero",
        "of=/dev/null",
        "bs=1",
        &format!("count={bytes}"),
    ]
    .map(String::from)
    .to_vec()
}

/// Bytes `dd` copies in the lossy runs: a one-page ring buffer cannot hold them.
const LOSSY_BYTES: u32 = 50_000;

/// The kernel's lost-event records can overstate a loss; by this share of the samples
/// (1/10) at most, before a count is taken as counted twice.
const OVERSTATED_LOSS_DIVISOR: u64 = 10;

/// Live: a one-page ring buffer usually overruns; the `PERF_RECORD_LOST` counts perf passes on
/// show as `kernel_lost` drops. The kernel reports a pending loss only with its next
/// successful write, so a loss at the very end (a starved `perf record`) never shows in the
/// stream; perf's end-of-run tally on stderr completes the count when over 5 % were lost.
/// So arrived plus counted lost is every traced event, less at most 5 %, and never more.
#[test]
fn live_perf_overrun_is_counted_as_kernel_lost() {
    if !perf_usable() {
        return;
    }
    let stats = Arc::new(SourceStats::new("perf"));
    let target = PerfTarget::Command(dd_of(LOSSY_BYTES));
    let mut r = spawn_script_with(
        &target,
        Arch::X86_64,
        stats.clone(),
        RecordOptions {
            mmap_pages: 1,
            ..RecordOptions::default()
        },
    )
    .expect("spawn perf");
    let batches = drain(&mut r);
    assert_eq!(stats.decode_errors(), 0);
    let lost = stats.dropped(DropReason::KernelLost);
    assert_eq!(lost, r.lost_events());
    let arrived = traced(&batches);
    // One read and one write per byte, an enter and an exit sample each, plus startup.
    let traced_at_least = 4 * u64::from(LOSSY_BYTES);
    let traced_at_most = traced_at_least + 2_000;
    // Lost records may overstate a little (see `recorded_overrun_accounts_for_every_sample`).
    let counted_at_most = traced_at_most + traced_at_most / OVERSTATED_LOSS_DIVISOR;
    assert!(
        arrived + lost <= counted_at_most,
        "arrived {arrived} + lost {lost} > {counted_at_most}: counted twice?"
    );
    // perf stays silent about a loss of up to 5 % (of at most `traced_at_most` samples).
    let silent_at_most = traced_at_most / 20;
    assert!(
        arrived + lost + silent_at_most >= traced_at_least,
        "arrived {arrived} + lost {lost} fall short of {traced_at_least} by more than perf's 5 % tally threshold"
    );
}

/// Recorded to a file and decoded by the file reader: `kernel_lost` plus the decoded
/// events stay within the samples perf itself says it processed (its tally also counts the
/// final unreported loss, from the `PERF_RECORD_LOST_SAMPLES` totals that `perf script`
/// does not print), give or take the kernel's overstatement, and account for most of them. When perf lost nothing, neither do we.
#[test]
fn recorded_overrun_accounts_for_every_sample() {
    if !perf_usable() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data_file = dir.path().join("perf.data");
    let status = Command::new("perf")
        .args(["record", "-q", "-m", "1", "-e", "raw_syscalls:sys_enter"])
        .args(["-e", "raw_syscalls:sys_exit", "-o"])
        .arg(&data_file)
        .arg("--")
        .args(dd_of(LOSSY_BYTES))
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let script = Command::new("perf")
        .args(["script", "--ns", "--show-lost-events"])
        .args(["-F", "comm,pid,tid,time,event,trace", "-i"])
        .arg(&data_file)
        .output()
        .unwrap();
    assert!(script.status.success());
    // perf's own tally on stderr: `Processed 200250 samples and lost 55.92%!`, printed
    // only when something was lost.
    let stderr = String::from_utf8_lossy(&script.stderr);
    let processed: Option<u64> = stderr
        .split("Processed ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok());
    let stats = Arc::new(SourceStats::new("perf"));
    let mut r = PerfScriptReader::new(&script.stdout[..], Arch::X86_64, stats.clone());
    let batches = drain(&mut r);
    assert_eq!(stats.decode_errors(), 0);
    let lost = stats.dropped(DropReason::KernelLost);
    let arrived = traced(&batches);
    // Each loss record in the stream marks `dd`'s events (the only process traced) unless
    // none came since the previous one; none is invented.
    let records = String::from_utf8_lossy(&script.stdout)
        .matches("PERF_RECORD_LOST")
        .count() as u64;
    let marked = markers(&batches);
    assert!(
        marked <= records,
        "{marked} markers for {records} loss records"
    );
    assert_eq!(
        marked > 0,
        records > 0,
        "{marked} markers for {records} loss records"
    );
    // The engine takes every marker as a loss report, and drops the exits after a loss
    // whose entry came before it. Without the markers those exits make calls that never
    // happened (an earlier entry with a later call's exit) or mismatched pairs.
    let analyse = |with_markers: bool| {
        let mut engine = Engine::new(Params::default()).unwrap();
        for b in &batches {
            let events: Vec<SyscallEvent> = b
                .events
                .iter()
                .filter(|e| with_markers || e.kind != EventKind::Lost)
                .copied()
                .collect();
            engine.ingest("dd", &events);
        }
        engine.counters()
    };
    let (told, silent) = (analyse(true), analyse(false));
    assert_eq!(told.loss_reports, marked);
    let spurious = (silent.calls - told.calls) + (silent.unmatched_exits - told.unmatched_exits);
    assert!(spurious <= told.pairs_across_loss, "{told:?} vs {silent:?}");
    if marked >= 100 {
        assert!(
            spurious > 0,
            "{marked} losses and no pair across one: {told:?}"
        );
    }
    let Some(processed) = processed else {
        // No tally on stderr. perf kept up (a fast, idle machine): then neither may we
        // count a loss, and every read and write of `dd` must have arrived. Or perf
        // marked its losses only in the script output (seen on a loaded machine): then
        // the loss we counted must come from those records, not be invented.
        if lost == 0 {
            let traced_at_least = 4 * u64::from(LOSSY_BYTES);
            assert!(arrived >= traced_at_least, "{arrived} < {traced_at_least}");
        } else {
            let marked = String::from_utf8_lossy(&script.stdout)
                .matches("LOST")
                .count();
            assert!(
                marked > 0,
                "{lost} counted lost without a LOST record; stderr: {stderr}"
            );
        }
        return;
    };
    // The kernel's `PERF_RECORD_LOST` counts can overstate the loss a little: once (a CI
    // pre-check, 2026-11-23) they summed to 135,570 where perf's tally said 121,738 were
    // lost. Counting a loss twice would overstate it by far more.
    assert!(
        arrived + lost <= processed + processed / OVERSTATED_LOSS_DIVISOR,
        "arrived {arrived} + lost {lost} > processed {processed} + 10 %"
    );
    assert!(
        (arrived + lost) * 2 > processed,
        "arrived {arrived} + lost {lost} vs processed {processed}"
    );
}

/// Per-syscall counts of `strace -f -c` for a command (`None` when strace is missing).
fn strace_counts(argv: &[String]) -> Option<BTreeMap<String, u64>> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("strace.txt");
    let status = Command::new("strace")
        .args(["-f", "-c", "-o"])
        .arg(&out)
        .arg("--")
        .args(argv)
        .stderr(std::process::Stdio::null())
        .status()
        .ok()?;
    if !status.success() {
        return None;
    }
    let text = std::fs::read_to_string(&out).ok()?;
    // `% time  seconds  usecs/call  calls  [errors]  syscall`
    Some(
        text.lines()
            .filter_map(|l| {
                let t: Vec<&str> = l.split_whitespace().collect();
                let calls = t.get(3)?.parse().ok()?;
                let name = t.last()?;
                (*name != "total").then(|| (name.to_string(), calls))
            })
            .collect(),
    )
}

/// `perf trace` run live on a real short process: its per-syscall counts for that process
/// match strace's for the same command, and with the 4 MiB buffer nothing is lost.
///
/// Known perf behaviour (perf 6.1, seen 2 runs in 5 under CPU contention): a stretch of
/// `perf trace -o /dev/stdout` text goes missing mid-line (~20 calls, one cut line that is
/// counted as a decode error) with no `LOST` record; hence the small tolerances below.
#[test]
fn live_perf_trace_counts_match_strace() {
    if !perf_usable() {
        return;
    }
    // Small enough that the 4 MiB buffer holds it all even if perf trace falls behind.
    const BYTES: u32 = 5_000;
    let argv = dd_of(BYTES);
    let stats = Arc::new(SourceStats::new("perf"));
    let mut r =
        spawn_trace(&PerfTarget::Command(argv.clone()), stats.clone()).expect("spawn perf trace");
    let batches = drain(&mut r);
    assert_eq!(
        stats.dropped(DropReason::KernelLost),
        0,
        "perf trace lost events"
    );
    assert!(
        stats.decode_errors() <= 2,
        "{} bad lines",
        stats.decode_errors()
    );
    let mut counts: BTreeMap<SyscallId, u64> = BTreeMap::new();
    for e in batches
        .iter()
        .filter(|b| b.process.comm.as_deref() == Some("dd"))
        .flat_map(|b| &b.events)
    {
        assert_eq!(e.kind, EventKind::Complete);
        *counts.entry(e.syscall).or_default() += 1;
    }
    let read = SyscallId::from_name("read");
    let write = SyscallId::from_name("write");
    let Some(expected) = strace_counts(&argv) else {
        // The strace comparison is skipped: perf trace is checked against dd's own
        // arithmetic only.
        if Command::new("strace").arg("-V").output().is_err() {
            prereq::missing_tool(
                "strace (perf trace's counts checked against dd's arithmetic only)",
                "apt-get install strace",
            );
        } else {
            prereq::skip(
                "strace cannot trace dd here (ptrace not permitted?): perf trace's counts \
                 checked against dd's arithmetic only",
            );
        }
        assert!(counts.get(&read).copied().unwrap_or(0) > u64::from(BYTES));
        assert!(counts.get(&write).copied().unwrap_or(0) > u64::from(BYTES));
        return;
    };
    for name in ["read", "write"] {
        let id = SyscallId::from_name(name);
        let got = counts.get(&id).copied().unwrap_or(0);
        let want = expected.get(name).copied().unwrap_or(0);
        assert!(want > u64::from(BYTES), "strace {name} {want}");
        // Usually equal; at most 1% short (the perf behaviour above), never more.
        assert!(
            got <= want && got * 100 >= want * 99,
            "{name}: perf trace {got} vs strace {want}"
        );
    }
    // Startup calls match too, up to exec (perf's command wrapper is `sh -c exec`, and
    // strace counts the exit_group that never returns).
    let total: u64 = counts.values().sum();
    let strace_total: u64 = expected.values().sum();
    assert!(
        total * 100 >= strace_total * 99 && total <= strace_total + 5,
        "total calls: perf trace {total}, strace {strace_total}"
    );
}

#[test]
fn stdin_dash_and_compressed_inputs_read_alike() {
    let plain = data("perf_script_mariadb.txt");
    let text = std::fs::read(&plain).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let zst = dir.path().join("t.txt.zst");
    std::fs::write(&zst, zstd::encode_all(&text[..], 3).unwrap()).unwrap();
    let (a, _) = read_script(&plain);
    let (b, _) = read_script(&zst);
    assert_eq!(event_counts(&a), event_counts(&b));
    let mut r = faultline::sources::input::open(&zst).unwrap();
    let mut first = String::new();
    r.read_line(&mut first).unwrap();
    assert!(first.contains("raw_syscalls"));
}

#[test]
fn lines_straddling_buffer_refills_decode_the_same() {
    let text = std::fs::read(data("perf_script_mariadb.txt")).unwrap();
    let (whole, _) = read_script(&data("perf_script_mariadb.txt"));
    // A tiny buffer splits nearly every line across refills; no final newline either.
    let trimmed = &text[..text.len() - 1];
    for cap in [7, 64, 101] {
        let stats = Arc::new(SourceStats::new("perf"));
        let input = std::io::BufReader::with_capacity(cap, trimmed);
        let mut r = PerfScriptReader::new(input, Arch::X86_64, stats.clone());
        let batches = drain(&mut r);
        assert_eq!(stats.decode_errors(), 0, "buffer {cap}");
        assert_eq!(event_counts(&batches), event_counts(&whole), "buffer {cap}");
        assert_eq!(r.bytes_read(), trimmed.len() as u64);
    }
}

#[test]
fn live_mode_emits_what_has_arrived_without_waiting_for_a_full_batch() {
    let text = std::fs::read(data("perf_script_mariadb.txt")).unwrap();
    let first_batch = |live: bool| {
        // A small buffer stands for a pipe delivering a line or two at a time.
        let input = std::io::BufReader::with_capacity(128, &text[..]);
        let stats = Arc::new(SourceStats::new("perf"));
        let r = PerfScriptReader::new(input, Arch::X86_64, stats);
        let mut r = if live { r.live() } else { r };
        r.next_batch().unwrap().unwrap().events.len()
    };
    assert!(first_batch(true) <= 2);
    // Recorded files fill batches: every line of the fixture is one event, all of one
    // process within a second, so the first batch holds them all.
    let events = text
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    assert!(
        events <= MAX_BATCH_EVENTS,
        "{events} lines: more than a batch"
    );
    assert_eq!(first_batch(false), events);
}
