//! Live capture: runs `perf record … -o - | perf script` (or `perf trace`) on given pids, a
//! cgroup, a command or the whole system, and streams the text through the same readers as
//! recorded files. Readers block; the host runs them in `spawn_blocking`.

use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use faultline_engine::syscalls::Arch;

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
    /// A command started under perf; its stdout goes to our stderr so it cannot corrupt the
    /// trace stream on stdout.
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
    record_command_controlled(target, opts, false)
}

/// The `perf record` command, reading control commands on its stdin when `control`.
fn record_command_controlled(
    target: &PerfTarget,
    opts: RecordOptions,
    control: bool,
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
    cmd.args(["-k", "CLOCK_MONOTONIC", "-o", "-"]);
    if control {
        cmd.args(["--control", "fd:0"]);
    }
    target_args(&mut cmd, target)?;
    Ok(cmd)
}

/// The `perf script` command decoding pipe-mode data from stdin into the compact field set.
pub fn script_command() -> Command {
    let mut cmd = Command::new(PERF);
    cmd.args([
        "script",
        "-i",
        "-",
        "--ns",
        // Ring-buffer overruns become `PERF_RECORD_LOST` lines, counted as `kernel_lost`.
        "--show-lost-events",
        "-F",
        "comm,pid,tid,time,event,trace",
    ]);
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
    let record = record_command_controlled(target, opts, ping.is_some())?;
    let out = ChildOutput::spawn_pipe_pinged(record, script_command(), INSTALL_HINT, ping)?;
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
        let a = args(&record_command_controlled(&cmd, opts, true).unwrap());
        let at = a.iter().position(|x| x == "--control").expect("--control");
        assert!(at < a.iter().position(|x| x == "--").expect("--"));
    }

    /// Lost-event records are what `kernel_lost` counts: the decoder must be asked for them.
    #[test]
    fn script_shows_lost_events() {
        assert!(args(&script_command()).contains(&"--show-lost-events".to_string()));
    }
}
