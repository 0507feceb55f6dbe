//! Live capture: runs `perf record … -o - | perf script` (or `perf trace`) on given pids, a
//! cgroup, a command or the whole system, and streams the text through the same readers as
//! recorded files. Readers block; the host runs them in `spawn_blocking`.

use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use faultline_engine::syscalls::Arch;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::script::PerfScriptReader;
use super::trace::PerfTraceReader;
use crate::pipeline::telemetry::SourceStats;
use crate::sources::input::{ChildOutput, Ping};
use crate::sources::SourceError;

/// The executable.
pub const PERF: &str = "perf";
const INSTALL_HINT: &str =
    "install perf, e.g. `apt install linux-perf` (Debian) or `linux-tools-$(uname -r)` (Ubuntu)";

/// What to trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PerfTarget {
    /// Existing processes (all their threads).
    Pids(Vec<u32>),
    /// Every process of a cgroup (v2 path relative to the cgroup root, e.g. `system.slice/db.service`).
    Cgroup(String),
    /// A command started under perf; its stdout goes to perf's stderr so it cannot corrupt
    /// the trace stream on stdout (faultline logs that stderr line by line).
    Command(Vec<String>),
    /// All processes (heavy: every syscall of the machine).
    SystemWide,
}

/// Ring-buffer pages per CPU (4 MiB): with perf's default, a busy process overruns the
/// buffer while `perf record` writes to a pipe and perf loses most events (still counted:
/// `kernel_lost` drops).
pub const MMAP_PAGES: u32 = 1024;

/// The tracepoints of every call's two halves.
const EVENTS: [&str; 4] = [
    "-e",
    "raw_syscalls:sys_enter",
    "-e",
    "raw_syscalls:sys_exit",
];

/// The scheduler's account of each traced thread's CPU time and of how it leaves the CPU
/// (see `faultline_engine::cpu_time`): tells a thread burning a CPU from one waiting for
/// it, and a spinner from a thread that pages.
const SCHED_EVENTS: [&str; 2] = ["sched:sched_stat_runtime", "sched:sched_switch"];

/// The hardware counters sampled per thread (see [`CounterMode`]), each with a fixed
/// period: perf's per-event `name/period=N/` syntax, because `-c N` would give all three
/// the same period and their rates differ by orders of magnitude. Each sample becomes one
/// `EventKind::Counters` record of `period` events of its counter.
///
/// The periods bound the cost: a thread spinning flat out at ~3.5 GHz yields ~175
/// `cycles` samples a second (20 M), 117–350 `instructions` samples at 1–3 instructions
/// a cycle (30 M), and a thread missing at the engine's cache-thrash threshold (20 misses
/// per 1,000 instructions at 3.5 G instructions a second, 70 M misses) ~350
/// `cache-misses` samples (200 k). So a CPU adds at most ~1,000 records a second, against
/// the hundreds of thousands of syscall halves a busy service makes, and every counter
/// still resolves the engine's symptom rules within one cadence epoch: a spinner's
/// near-zero miss rate (under 0.5 per 1,000 instructions) shows as at most a few
/// `cache-misses` samples a second, a busy-loop's cycle rate (1 per wall-clock ns) as ~50.
pub const COUNTER_EVENTS: [(&str, u64); 3] = [
    ("cycles", 20_000_000),
    ("instructions", 30_000_000),
    ("cache-misses", 200_000),
];

/// Whether the live `perf record` samples the hardware counters of [`COUNTER_EVENTS`]
/// (the engine's vital signs and symptoms such as `busy_loop`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CounterMode {
    /// When this machine's PMU counts them (a virtual machine often has no PMU): probed
    /// once with `perf stat`.
    #[default]
    Auto,
    /// Always; starting the capture fails when the PMU cannot count them.
    On,
    /// Never: syscalls (and scheduler records) only.
    Off,
}

impl CounterMode {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::On => "on",
            Self::Off => "off",
        }
    }
}

impl Serialize for CounterMode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// `"auto"`, `"on"`, `"off"`, or a boolean (`true` = on, `false` = off): YAML 1.1 readers
/// and environment overrides turn a bare `on`/`off`/`true` into one.
impl<'de> Deserialize<'de> for CounterMode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = CounterMode;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("\"auto\", \"on\" or \"off\"")
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<CounterMode, E> {
                Ok(if v { CounterMode::On } else { CounterMode::Off })
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<CounterMode, E> {
                match v.to_ascii_lowercase().as_str() {
                    "auto" => Ok(CounterMode::Auto),
                    "on" | "true" => Ok(CounterMode::On),
                    "off" | "false" => Ok(CounterMode::Off),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// Where tracefs lists tracepoints (perf resolves them there too).
const TRACEFS: [&str; 2] = [
    "/sys/kernel/tracing/events",
    "/sys/kernel/debug/tracing/events",
];

/// Whether this kernel has the tracepoint `group:name`: `perf record` refuses to start on
/// an unknown event, and the syscall trace is worth having without it.
fn tracepoint_available(event: &str) -> bool {
    let path = event.replace(':', "/");
    TRACEFS
        .iter()
        .any(|root| std::path::Path::new(root).join(&path).exists())
}

fn target_args(cmd: &mut Command, target: &PerfTarget) -> Result<(), SourceError> {
    match target {
        PerfTarget::Pids(pids) if pids.is_empty() => {
            return Err(SourceError::Invalid("perf: empty pid list".into()))
        }
        PerfTarget::Pids(pids) => {
            let list: Vec<String> = pids.iter().map(u32::to_string).collect();
            cmd.arg("-p").arg(list.join(","));
        }
        // perf's -G needs system-wide mode.
        PerfTarget::Cgroup(cg) => {
            cmd.arg("-a").arg("-G").arg(cg);
        }
        PerfTarget::Command(argv) if argv.is_empty() => {
            return Err(SourceError::Invalid("perf: empty command".into()))
        }
        // Its stdin is not perf's, which may be perf's control channel.
        PerfTarget::Command(argv) => {
            cmd.args([
                "--",
                "sh",
                "-c",
                "exec \"$@\" 1>&2 </dev/null",
                "faultline-workload",
            ])
            .args(argv);
        }
        PerfTarget::SystemWide => {
            cmd.arg("-a");
        }
    }
    Ok(())
}

/// How `perf record` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordOptions {
    /// Ring-buffer pages per CPU (a power of two): smaller saves memory on quiet targets,
    /// larger loses fewer events on busy ones.
    pub mmap_pages: u32,
    /// Also record `sched:sched_stat_runtime` and `sched:sched_switch` when the kernel has
    /// them (more records: measured in the engine's `EVALUATION.md`): each thread's CPU
    /// time and how it leaves the CPU, which tell a runaway thread from a CPU-starved one
    /// and a spinner from a thread that pages.
    pub cpu_time: bool,
    /// How often perf is told to hand over what its buffers hold (a `ping` on its control
    /// channel, when this perf has `--control`). Without it, perf is woken only when half
    /// of a CPU's buffer (2 MiB) is full: a quiet service's calls, or a hung one's last
    /// ones, waited minutes in the kernel. `None`: perf's own wakeups only.
    pub flush_every: Option<Duration>,
    /// Also sample each thread's hardware counters ([`COUNTER_EVENTS`]).
    pub counters: CounterMode,
}

/// Default of [`RecordOptions::flush_every`]: a wakeup of `perf record` a second costs
/// nothing measurable and bounds the wait of a quiet target's records to a few seconds.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);

impl Default for RecordOptions {
    fn default() -> Self {
        Self {
            mmap_pages: MMAP_PAGES,
            cpu_time: true,
            flush_every: Some(FLUSH_EVERY),
            counters: CounterMode::Auto,
        }
    }
}

/// The ping that makes `perf record` hand over its buffers, if `opts` asks for one and
/// this perf can take it.
fn flush_ping(opts: &RecordOptions) -> Option<Ping> {
    let every = opts.flush_every?;
    control_supported().then_some(Ping {
        line: b"ping\n",
        every,
    })
}

/// Whether a capture with `opts` hands over a quiet target's records within seconds
/// (perf pinged to flush): only then does its silence mean the target's.
pub fn delivers_promptly(opts: &RecordOptions) -> bool {
    flush_ping(opts).is_some()
}

/// Whether this perf takes `--control` (perf 5.10 and later). Any command on the control
/// channel wakes `perf record`, which then writes out everything its buffers hold; `ping`
/// is the one that changes nothing else.
fn control_supported() -> bool {
    static SUPPORTED: OnceLock<bool> = OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        let help = Command::new(PERF)
            .args(["record", "-h"])
            .stdin(Stdio::null())
            .output();
        let supported = help.is_ok_and(|o| {
            [&o.stdout, &o.stderr]
                .iter()
                .any(|t| String::from_utf8_lossy(t).contains("--control"))
        });
        if !supported {
            tracing::info!(
                "this perf has no --control: a quiet target's calls reach faultline only when perf's buffer half fills (or at its end)"
            );
        }
        supported
    })
}

/// Whether this machine's PMU counts every event of [`COUNTER_EVENTS`] for a task: probed
/// once with `perf stat` on `true`, which prints `<not supported>` (no PMU, as in many
/// virtual machines) or `<not counted>` instead of a count when it cannot.
pub fn counters_supported() -> bool {
    static SUPPORTED: OnceLock<bool> = OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        let events: Vec<&str> = COUNTER_EVENTS.iter().map(|(name, _)| *name).collect();
        let stat = Command::new(PERF)
            .args(["stat", "-x", ",", "-e", &events.join(","), "true"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .output();
        let supported = stat.is_ok_and(|o| {
            o.status.success() && stat_counts_all(&String::from_utf8_lossy(&o.stderr), &events)
        });
        if !supported {
            tracing::info!(
                "this machine's PMU does not count cycles, instructions and cache-misses (perf stat): per-thread vital signs are off"
            );
        }
        supported
    })
}

/// Whether `perf stat -x ,` output (`<count>,<unit>,<event>,…` lines) has a count for every
/// event of `events`, and a non-zero one for the first (a stub PMU may count nothing).
fn stat_counts_all(text: &str, events: &[&str]) -> bool {
    events.iter().enumerate().all(|(i, event)| {
        text.lines().any(|line| {
            let mut fields = line.split(',');
            let count = fields.next().and_then(|c| c.trim().parse::<u64>().ok());
            // Some perf versions add a modifier (`cycles:u` when kernel counting is denied);
            // hybrid CPUs count per PMU (`cpu_core/cycles/`, `cpu_atom/cycles/`).
            let name = fields.nth(1).map(|n| {
                let n = n.split(':').next().unwrap_or(n).trim_end_matches('/');
                n.rsplit('/').next().unwrap_or(n)
            });
            name == Some(*event) && count.is_some_and(|c| i > 0 || c > 0)
        })
    })
}

/// Whether a capture with `mode` samples counters here; an error when `On` and the PMU
/// cannot.
fn sample_counters(mode: CounterMode) -> Result<bool, SourceError> {
    match mode {
        CounterMode::Off => Ok(false),
        CounterMode::Auto => Ok(counters_supported()),
        CounterMode::On if counters_supported() => Ok(true),
        CounterMode::On => Err(SourceError::Invalid(
            "perf: counters = \"on\" but this machine's PMU does not count cycles, instructions and cache-misses (`perf stat -e cycles,instructions,cache-misses true` prints <not supported>); set counters = \"auto\" or \"off\"".into(),
        )),
    }
}

/// The `perf record` command writing pipe-mode data to stdout.
pub fn record_command(target: &PerfTarget) -> Result<Command, SourceError> {
    record_command_with(target, RecordOptions::default())
}

/// [`record_command`] with explicit options. It takes no control channel: that needs
/// the ping on its stdin that [`spawn_script_with`] sets up (perf spins on a control
/// channel at end of file, and aborts when one closes).
pub fn record_command_with(
    target: &PerfTarget,
    opts: RecordOptions,
) -> Result<Command, SourceError> {
    record_command_controlled(target, opts, false, sample_counters(opts.counters)?)
}

/// The `perf record` command, reading control commands on its stdin when `control`, and
/// sampling the hardware counters when `counters` (resolved from `opts.counters`).
fn record_command_controlled(
    target: &PerfTarget,
    opts: RecordOptions,
    control: bool,
    counters: bool,
) -> Result<Command, SourceError> {
    let mut cmd = Command::new(PERF);
    cmd.arg("record")
        .arg("-q")
        .args(["-m", &opts.mmap_pages.to_string()])
        .args(EVENTS);
    if opts.cpu_time {
        for event in SCHED_EVENTS {
            if tracepoint_available(event) {
                cmd.args(["-e", event]);
            } else {
                tracing::info!("{event} is not available: CPU-burner detection is partly off");
            }
        }
    }
    if counters {
        for (name, period) in COUNTER_EVENTS {
            cmd.arg("-e").arg(format!("{name}/period={period}/"));
        }
    }
    cmd.args(["-k", "CLOCK_MONOTONIC", "-o", "-"]);
    if control {
        cmd.args(["--control", "fd:0"]);
    }
    target_args(&mut cmd, target)?;
    Ok(cmd)
}

/// The `perf script` command decoding pipe-mode data from stdin into the compact field set;
/// with `counters`, hardware-counter samples also print their period (the count the sample
/// stands for).
pub fn script_command(counters: bool) -> Command {
    let mut cmd = Command::new(PERF);
    cmd.args([
        "script",
        "-i",
        "-",
        "--ns",
        // Ring-buffer overruns become `PERF_RECORD_LOST` lines, counted as `kernel_lost`.
        "--show-lost-events",
    ]);
    if counters {
        // Fields per event type: `trace` for hardware events, or `period` for tracepoints,
        // would draw a warning per type on stderr (and a period field on syscall lines).
        cmd.args([
            "-F",
            "trace:comm,pid,tid,time,event,trace",
            "-F",
            "hw:comm,pid,tid,time,period,event",
        ]);
    } else {
        cmd.args(["-F", "comm,pid,tid,time,event,trace"]);
    }
    cmd
}

/// Starts `perf record | perf script` on `target`.
pub fn spawn_script(
    target: &PerfTarget,
    arch: Arch,
    stats: Arc<SourceStats>,
) -> Result<PerfScriptReader<ChildOutput>, SourceError> {
    spawn_script_with(target, arch, stats, RecordOptions::default())
}

/// [`spawn_script`] with explicit recording options.
pub fn spawn_script_with(
    target: &PerfTarget,
    arch: Arch,
    stats: Arc<SourceStats>,
    opts: RecordOptions,
) -> Result<PerfScriptReader<ChildOutput>, SourceError> {
    warn_if_not_permitted();
    let ping = flush_ping(&opts);
    let counters = sample_counters(opts.counters)?;
    let record = record_command_controlled(target, opts, ping.is_some(), counters)?;
    let script = script_command(counters);
    let out = ChildOutput::spawn_pipe_pinged(record, script, INSTALL_HINT, ping)?;
    let stderr = out.stderr_tail();
    Ok(PerfScriptReader::new(out, arch, stats)
        .live()
        .with_tool_stderr(stderr))
}

/// Starts `perf trace` on `target` (whole calls with durations, lower volume than record).
pub fn spawn_trace(
    target: &PerfTarget,
    stats: Arc<SourceStats>,
) -> Result<PerfTraceReader<ChildOutput>, SourceError> {
    warn_if_not_permitted();
    let mut cmd = Command::new(PERF);
    // perf trace writes to stderr unless told otherwise.
    let pages = MMAP_PAGES.to_string();
    // Ring-buffer overruns show as `LOST <n> events!` lines, counted as `kernel_lost`.
    cmd.args(["trace", "-T", "-m", &pages, "-o", "/dev/stdout"]);
    target_args(&mut cmd, target)?;
    let out = ChildOutput::spawn(cmd, INSTALL_HINT)?;
    Ok(PerfTraceReader::new(out, stats))
}

/// Why perf will probably be refused, when it can be told up front.
///
/// Tracepoints need root, `CAP_PERFMON`, or `kernel.perf_event_paranoid = -1`; we cannot see
/// capabilities cheaply, so this only warns and perf's own error (carried in the read error)
/// remains the authority.
pub fn permission_problem() -> Option<String> {
    let paranoid: i32 = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let euid: u32 = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    (euid != 0 && paranoid > -1).then(|| {
        format!(
            "tracing syscalls with perf needs root or CAP_PERFMON, or kernel.perf_event_paranoid=-1 (it is {paranoid})"
        )
    })
}

fn warn_if_not_permitted() {
    if let Some(problem) = permission_problem() {
        tracing::warn!("{problem}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(cmd: &Command) -> Vec<String> {
        cmd.get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn record_targets() {
        let a = args(&record_command(&PerfTarget::Pids(vec![1, 2])).unwrap());
        assert!(a.windows(2).any(|w| w == ["-p", "1,2"]));
        assert!(a.windows(2).any(|w| w == ["-o", "-"]));
        let a = args(&record_command(&PerfTarget::Cgroup("db".into())).unwrap());
        assert!(a.windows(3).any(|w| w == ["-a", "-G", "db"]));
        let a = args(&record_command(&PerfTarget::Command(vec!["ls".into()])).unwrap());
        assert_eq!(a.last().map(String::as_str), Some("ls"));
        assert!(record_command(&PerfTarget::Pids(vec![])).is_err());
        assert!(record_command(&PerfTarget::Command(vec![])).is_err());
        let opts = RecordOptions {
            mmap_pages: 8,
            cpu_time: true,
            flush_every: Some(FLUSH_EVERY),
            counters: CounterMode::Off,
        };
        let a = args(&record_command_with(&PerfTarget::SystemWide, opts).unwrap());
        assert!(a.windows(2).any(|w| w == ["-m", "8"]));
        // The scheduler's records ride along when asked for and the kernel has them.
        for event in SCHED_EVENTS {
            assert_eq!(
                a.windows(2).any(|w| w == ["-e", event]),
                tracepoint_available(event),
                "{event}"
            );
        }
        let off = RecordOptions {
            cpu_time: false,
            ..opts
        };
        let a = args(&record_command_with(&PerfTarget::SystemWide, off).unwrap());
        assert!(!SCHED_EVENTS
            .iter()
            .any(|e| a.windows(2).any(|w| w == ["-e", *e])));
        // The control channel only where its ping is set up, before the target's
        // arguments (a command's argv ends the list).
        let controlled = |a: &[String]| a.windows(2).any(|w| w == ["--control", "fd:0"]);
        assert!(!controlled(&a));
        let cmd = PerfTarget::Command(vec!["ls".into()]);
        let a = args(&record_command_controlled(&cmd, opts, true, false).unwrap());
        let at = a.iter().position(|x| x == "--control").expect("--control");
        assert!(at < a.iter().position(|x| x == "--").expect("--"));
    }

    /// Lost-event records are what `kernel_lost` counts: the decoder must be asked for them.
    #[test]
    fn script_shows_lost_events() {
        for counters in [false, true] {
            assert!(args(&script_command(counters)).contains(&"--show-lost-events".to_string()));
        }
    }

    /// Each counter gets its own period (a `-c N` would give all the same one), and the
    /// decoder prints the period of their samples only.
    #[test]
    fn counters_are_sampled_with_their_own_periods() {
        let opts = RecordOptions {
            counters: CounterMode::Off,
            ..RecordOptions::default()
        };
        let target = PerfTarget::Pids(vec![1]);
        let off = args(&record_command_controlled(&target, opts, false, false).unwrap());
        let on = args(&record_command_controlled(&target, opts, false, true).unwrap());
        for (name, period) in COUNTER_EVENTS {
            let event = format!("{name}/period={period}/");
            assert!(
                on.windows(2).any(|w| w[0] == "-e" && w[1] == event),
                "{on:?}"
            );
            assert!(!off.iter().any(|a| a.starts_with(name)), "{off:?}");
        }
        assert!(!on.iter().any(|a| a == "-c"));
        // Before the target's arguments: a command's argv ends the list.
        let at = on.iter().position(|a| a.starts_with("cycles/")).unwrap();
        assert!(at < on.iter().position(|a| a == "-p").unwrap());
        let script = args(&script_command(true));
        assert!(script.contains(&"hw:comm,pid,tid,time,period,event".to_string()));
        assert!(script.contains(&"trace:comm,pid,tid,time,event,trace".to_string()));
        assert!(!args(&script_command(false))
            .iter()
            .any(|a| a.contains("period")));
        assert_eq!(sample_counters(CounterMode::Off).ok(), Some(false));
        assert_eq!(
            sample_counters(CounterMode::Auto).ok(),
            Some(counters_supported())
        );
        assert_eq!(
            sample_counters(CounterMode::On).is_ok(),
            counters_supported()
        );
    }

    /// `perf stat -x ,` output of perf 6.1 here, and of a machine without a PMU.
    #[test]
    fn the_probe_reads_perf_stat() {
        let events = ["cycles", "instructions", "cache-misses"];
        let counted = "2085953,,cycles,16122793,100.00,,\n629291,,instructions,16122793,100.00,0.30,insn per cycle\n28755,,cache-misses,16122793,100.00,,\n";
        assert!(stat_counts_all(counted, &events));
        let user_only = "2085953,,cycles:u,1,100.00,,\n6,,instructions:u,1,100.00,,\n0,,cache-misses:u,1,100.00,,\n";
        assert!(stat_counts_all(user_only, &events));
        let none = "<not supported>,,cycles,0,100.00,,\n<not supported>,,instructions,0,100.00,,\n<not supported>,,cache-misses,0,100.00,,\n";
        assert!(!stat_counts_all(none, &events));
        let partly = "2085953,,cycles,1,100.00,,\n<not counted>,,instructions,0,0.00,,\n28755,,cache-misses,1,100.00,,\n";
        assert!(!stat_counts_all(partly, &events));
        let zero = "0,,cycles,1,100.00,,\n0,,instructions,1,100.00,,\n0,,cache-misses,1,100.00,,\n";
        assert!(!stat_counts_all(zero, &events));
        assert!(!stat_counts_all("", &events));
        // A hybrid CPU counts on each of its PMUs.
        let hybrid = "2085953,,cpu_core/cycles/,1,100.00,,\n7,,cpu_atom/cycles/,1,100.00,,\n629291,,cpu_core/instructions/,1,100.00,,\n28755,,cpu_core/cache-misses/,1,100.00,,\n";
        assert!(stat_counts_all(hybrid, &events));
    }

    #[test]
    fn counter_mode_spellings() {
        #[derive(serde::Deserialize)]
        struct T {
            c: CounterMode,
        }
        let mode = |v: &str| serde_json::from_str::<T>(&format!("{{\"c\": {v}}}")).map(|t| t.c);
        assert_eq!(mode("\"auto\"").ok(), Some(CounterMode::Auto));
        assert_eq!(mode("\"on\"").ok(), Some(CounterMode::On));
        assert_eq!(mode("\"Off\"").ok(), Some(CounterMode::Off));
        assert_eq!(mode("true").ok(), Some(CounterMode::On));
        assert_eq!(mode("false").ok(), Some(CounterMode::Off));
        let err = mode("\"sometimes\"").unwrap_err().to_string();
        assert!(err.contains("\"auto\", \"on\" or \"off\""), "{err}");
        assert!(mode("1").is_err());
        assert_eq!(
            serde_json::to_string(&CounterMode::On).ok().as_deref(),
            Some("\"on\"")
        );
    }
}
