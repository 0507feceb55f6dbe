//! Opening recorded inputs: plain, zstd- or gzip-compressed files, or stdin (`-`), so every
//! text decoder reads traces the way they are stored without a separate decompress step.
//!
//! Compression is recognised by the file's magic bytes (extensions lie, pipes have none);
//! the extension is only a fallback for files too short to sniff.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::child::{ChildStopper, TrackedChild};
use super::SourceError;

/// Read buffer size: large enough that per-read syscall overhead vanishes at 100s of MB/s.
const BUF_BYTES: usize = 256 * 1024;

const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Shared count of raw (still compressed) bytes read from an input, for progress bars:
/// comparing it with the file size gives a fraction even for compressed files.
#[derive(Clone, Debug, Default)]
pub struct ByteCounter(Arc<AtomicU64>);

impl ByteCounter {
    /// Bytes read so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A reader that counts the bytes passing through it into a [`ByteCounter`].
struct CountingReader<R> {
    inner: R,
    counter: ByteCounter,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.counter.0.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// How an input is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Zstd,
    Gzip,
}

impl Compression {
    /// Decides from the first bytes, falling back to the file name when they are inconclusive.
    pub fn detect(head: &[u8], name: &str) -> Compression {
        if head.starts_with(&ZSTD_MAGIC) {
            Compression::Zstd
        } else if head.starts_with(&GZIP_MAGIC) {
            Compression::Gzip
        } else if head.is_empty() || head.len() >= ZSTD_MAGIC.len() {
            // Empty, or enough bytes to be sure it is neither format: trust the content, not the name.
            Compression::None
        } else if name.ends_with(".zst") || name.ends_with(".zstd") {
            Compression::Zstd
        } else if name.ends_with(".gz") {
            Compression::Gzip
        } else {
            Compression::None
        }
    }
}

/// Opens `path` (or stdin for `-`) as buffered text, decompressing `.zst`/`.gz` transparently.
pub fn open(path: &Path) -> Result<Box<dyn BufRead + Send>, SourceError> {
    open_counted(path).map(|(r, _)| r)
}

/// Like [`open`], also returning a counter of raw bytes read (for progress against file size).
pub fn open_counted(path: &Path) -> Result<(Box<dyn BufRead + Send>, ByteCounter), SourceError> {
    let what = path.display().to_string();
    let io_err = |source| SourceError::Io {
        what: what.clone(),
        source,
    };
    let raw: Box<dyn Read + Send> = if path.as_os_str() == "-" {
        Box::new(io::stdin())
    } else {
        Box::new(File::open(path).map_err(io_err)?)
    };
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    wrap(raw, name).map_err(io_err)
}

/// Wraps an already open byte stream (a pipe, a socket) the same way [`open`] wraps files.
pub fn wrap(
    raw: Box<dyn Read + Send>,
    name: &str,
) -> io::Result<(Box<dyn BufRead + Send>, ByteCounter)> {
    let counter = ByteCounter::default();
    let counting = CountingReader {
        inner: raw,
        counter: counter.clone(),
    };
    let mut buffered = BufReader::with_capacity(BUF_BYTES, counting);
    let first = buffered.fill_buf()?;
    if first.is_empty() || first.len() >= ZSTD_MAGIC.len() {
        let compression = Compression::detect(first, name);
        return Ok((decoder(buffered, compression)?, counter));
    }
    // A pipe delivered fewer bytes than a magic number: gather them and put them back in
    // front, so a slow writer cannot make a compressed stream look like plain text.
    let mut head = Vec::with_capacity(ZSTD_MAGIC.len());
    (&mut buffered)
        .take(ZSTD_MAGIC.len() as u64)
        .read_to_end(&mut head)?;
    let compression = Compression::detect(&head, name);
    let rejoined = BufReader::with_capacity(BUF_BYTES, io::Cursor::new(head).chain(buffered));
    Ok((decoder(rejoined, compression)?, counter))
}

/// Puts the right decompressor (if any) on top of a buffered raw stream.
fn decoder<R: BufRead + Send + 'static>(
    buffered: R,
    compression: Compression,
) -> io::Result<Box<dyn BufRead + Send>> {
    Ok(match compression {
        Compression::None => Box::new(buffered),
        Compression::Zstd => Box::new(BufReader::with_capacity(
            BUF_BYTES,
            zstd::stream::read::Decoder::with_buffer(buffered)?,
        )),
        Compression::Gzip => Box::new(BufReader::with_capacity(
            BUF_BYTES,
            flate2::bufread::MultiGzDecoder::new(buffered),
        )),
    })
}

/// The text formats a recorded trace file can be in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    /// `perf script` output of syscall tracepoints.
    PerfScript,
    /// `perf trace` output (whole calls with durations).
    PerfTrace,
    /// `babeltrace2` text of an LTTng trace.
    BabeltraceText,
}

/// Bytes sniffed to recognise a trace format (a few lines).
const SNIFF_BYTES: usize = 64 * 1024;

impl TraceFormat {
    /// Recognises the format from the first lines of text, `None` if none fits.
    pub fn sniff(head: &[u8]) -> Option<TraceFormat> {
        let lines = head
            .split(|b| *b == b'\n')
            .map(|l| l.trim_ascii())
            .filter(|l| !l.is_empty() && !l.starts_with(b"#"))
            .take(20);
        let script = super::perf::script_line::LineParser::new();
        for line in lines {
            if line.starts_with(b"[") && memchr::memmem::find(line, b": {").is_some() {
                return Some(TraceFormat::BabeltraceText);
            }
            // faultline's TCP sampler writes its lines in `perf script` layout.
            if memchr::memmem::find(line, b"raw_syscalls:sys_").is_some()
                || memchr::memmem::find(line, b" syscalls:sys_").is_some()
                || memchr::memmem::find(line, b" faultline:tcp_segments:").is_some()
            {
                return Some(TraceFormat::PerfScript);
            }
            // The perf sources also record scheduler events and counter samples, and a
            // busy CPU fills the first lines with them before any syscall: a line the
            // `perf script` parser takes (its header has a time, so `perf trace` lines
            // are not taken) names the format too, whatever its event.
            if !matches!(
                script.parse(line),
                super::perf::script_line::Parsed::Malformed
            ) {
                return Some(TraceFormat::PerfScript);
            }
            if memchr::memmem::find(line, b" ms): ").is_some()
                || memchr::memmem::find(line, b"(         ): ").is_some()
            {
                return Some(TraceFormat::PerfTrace);
            }
        }
        None
    }
}

/// Opens any recorded trace with the right decoder: a directory is an LTTng CTF trace
/// (decoded by babeltrace2), a file is sniffed for `perf script`, `perf trace` or
/// babeltrace2 text (plain, `.zst` or `.gz`; `-` for stdin). `arch` names syscall numbers.
pub fn open_trace(
    path: &Path,
    arch: faultline_engine::syscalls::Arch,
    stats: Arc<crate::pipeline::telemetry::SourceStats>,
) -> Result<Box<dyn super::BatchReader>, SourceError> {
    if path.is_dir() || path.to_str().is_some_and(super::lttng::live_url::is_live) {
        let input = path
            .to_str()
            .ok_or_else(|| SourceError::Invalid(format!("path {} is not UTF-8", path.display())))?;
        return Ok(Box::new(super::lttng::open(input, arch, stats)?));
    }
    let (mut input, counter) = open_counted(path)?;
    let io_err = |source| SourceError::Io {
        what: path.display().to_string(),
        source,
    };
    // Peek without consuming: BufRead keeps what fill_buf returned. Fill to SNIFF_BYTES at
    // most by looking only at what one buffer holds (the buffer is 256 KiB).
    let head = input.fill_buf().map_err(io_err)?;
    let head = head.get(..head.len().min(SNIFF_BYTES)).unwrap_or_default();
    let format = TraceFormat::sniff(head).ok_or_else(|| {
        SourceError::Invalid(format!(
            "{}: not a recognised trace (expected perf script, perf trace or babeltrace2 text, or an LTTng trace directory)",
            path.display()
        ))
    })?;
    Ok(match format {
        TraceFormat::PerfScript => Box::new(super::perf::PerfScriptReader::with_progress(
            input, arch, stats, counter,
        )),
        TraceFormat::PerfTrace => Box::new(super::perf::PerfTraceReader::with_progress(
            input, stats, counter,
        )),
        TraceFormat::BabeltraceText => {
            Box::new(super::lttng::LttngTextReader::new(input, arch, stats))
        }
    })
}

/// Most stderr bytes of a child tool kept for the error message (its tail matters most).
const STDERR_TAIL_BYTES: usize = 8 * 1024;
/// How long the earlier stages of a pipeline get to end on their own once the last stage
/// ended cleanly. They normally have (their end ended its input); one still running has
/// nobody reading it, and if idle (a quiet target) it would never write, never see
/// EPIPE and never end, hanging the source while it looks healthy.
const UPSTREAM_GRACE: Duration = Duration::from_secs(5);
/// How long an ended earlier stage's stderr may stay open: a command `perf record` runs
/// inherits it, and a daemon that command left behind may hold it forever.
const UPSTREAM_STDERR_WAIT: Duration = Duration::from_secs(1);
/// Longest stderr line a tap sees whole; the rest of a longer line is cut off.
const STDERR_LINE_BYTES: usize = 4 * 1024;

/// Called with each line a child tool writes to stderr (without its newline), while the
/// tool runs: some tools report there what the output cannot say (babeltrace2's
/// discarded events). Runs on the stderr thread; all lines are seen before the output ends.
pub type StderrTap = Box<dyn FnMut(&[u8]) + Send>;

/// A line written to a tool's stdin at an interval while it runs: a control command that
/// keeps it from sitting on buffered data (see `sources::perf::live`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ping {
    /// The command, with its newline (`b"ping\n"` for perf).
    pub line: &'static [u8],
    /// How long the tool may sit on data: the ping's interval.
    pub every: std::time::Duration,
}

impl Ping {
    /// Writes the line every interval to a copy of `stdin` until the tool has closed its
    /// end (it exited).
    fn start(self, stdin: &std::os::fd::OwnedFd, tool: &str) {
        use std::io::Write;
        let mut pipe = match stdin.try_clone() {
            Ok(fd) => std::fs::File::from(fd),
            Err(e) => {
                tracing::warn!("cannot flush {tool} periodically ({e}): its data may arrive late");
                return;
            }
        };
        let spawned = std::thread::Builder::new()
            .name("faultline-ping".into())
            .spawn(move || loop {
                std::thread::sleep(self.every);
                if pipe.write_all(self.line).is_err() {
                    break;
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot flush {tool} periodically ({e}): its data may arrive late");
        }
    }
}

/// The stdout of a child tool (`perf`, `babeltrace2`) as buffered text.
///
/// At end of output the child is reaped; a failing exit status becomes a read error carrying
/// the tail of the tool's stderr, so "babeltrace2 could not open the trace" reaches the user
/// instead of looking like an empty trace. Death by the signal [`ChildOutput::stopper`]
/// sent is a clean end: the stop was ours, and end-of-run accounting must still happen.
/// Dropping it kills the child.
pub struct ChildOutput {
    tool: String,
    child: TrackedChild,
    stdout: BufReader<ChildStdout>,
    stderr: Option<StderrCollector>,
    /// Earlier stages of a pipeline (`perf record | perf script`), reaped with the last.
    upstream: Vec<Stage>,
    finished: bool,
    /// The stderr tail once the tool ended, for readers that take its end-of-run summary.
    stderr_tail: StderrTail,
    /// The write end of a [`Ping`]ed tool's stdin, held for the tool's whole life: perf
    /// aborts when its control channel closes under it (a ping thread that could not
    /// start must not end the capture).
    control: Option<std::os::fd::OwnedFd>,
}

/// An earlier stage of a pipeline: its name in messages (`perf record`), the process, and
/// the thread collecting its stderr.
struct Stage {
    name: String,
    child: TrackedChild,
    stderr: Option<StderrCollector>,
}

/// The tail of a child tool's stderr, filled when the tool has ended (see
/// [`ChildOutput::stderr_tail`]); shared so a reader owning the output can still see it.
pub type StderrTail = Arc<OnceLock<Vec<u8>>>;

impl ChildOutput {
    /// Starts `cmd` with stdout and stderr piped. A missing executable is a clear
    /// [`SourceError::Tool`] naming `install_hint`.
    pub fn spawn(mut cmd: Command, install_hint: &str) -> Result<Self, SourceError> {
        cmd.stdin(Stdio::null());
        Self::spawn_with_stdin_set(cmd, install_hint, None)
    }

    /// [`ChildOutput::spawn`], with each stderr line also passed to `tap` as it arrives.
    pub fn spawn_tapped(
        mut cmd: Command,
        install_hint: &str,
        tap: StderrTap,
    ) -> Result<Self, SourceError> {
        cmd.stdin(Stdio::null());
        Self::spawn_with_stdin_set(cmd, install_hint, Some(tap))
    }

    /// Runs `first | second` and reads `second`'s stdout. `first`'s stderr is captured
    /// too (inherited, its raw text would break faultline's one-JSON-object-per-line
    /// logs): each line is logged, and its tail goes into the error when the pipeline
    /// fails. Stages are named by program and subcommand (`perf record`), as
    /// both stages run the same program.
    pub fn spawn_pipe(
        first: Command,
        second: Command,
        install_hint: &str,
    ) -> Result<Self, SourceError> {
        Self::spawn_pipe_pinged(first, second, install_hint, None)
    }

    /// [`ChildOutput::spawn_pipe`], writing `ping` to `first`'s stdin at its interval for
    /// as long as `first` runs (a control channel: `perf record --control fd:0`).
    pub fn spawn_pipe_pinged(
        mut first: Command,
        second: Command,
        install_hint: &str,
        ping: Option<Ping>,
    ) -> Result<Self, SourceError> {
        let program = first.get_program().to_string_lossy().into_owned();
        let name = stage_name(&first);
        let stdin = if ping.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        };
        first
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Own process group (as below): a Ctrl-C in faultline's terminal reaches the whole
        // foreground group, and tools killed by it before faultline stops them ended as
        // failures, losing what was still in the pipe and perf's loss tally.
        first.process_group(0);
        let mut head = first
            .spawn()
            .map_err(|e| spawn_error(&program, &e, install_hint))?;
        let Some(pipe) = head.stdout.take() else {
            let _ = head.kill();
            let _ = head.wait();
            return Err(SourceError::Tool {
                tool: name,
                message: "no stdout pipe".into(),
            });
        };
        let control = head.stdin.take().map(std::os::fd::OwnedFd::from);
        let stderr = head.stderr.take().map(|e| {
            let name = name.clone();
            // Info, not warn: with `-q` perf record prints only errors (which also end up
            // in the failure), so what comes here is mostly a traced command's output.
            let log: StderrTap = Box::new(move |line: &[u8]| {
                let line = String::from_utf8_lossy(line);
                if !line.trim().is_empty() {
                    tracing::info!(tool = %name, "{}", line.trim_end());
                }
            });
            collect_stderr_tail(e, Some(log))
        });
        let head = Stage {
            name,
            child: TrackedChild::new(head),
            stderr,
        };
        let mut second = second;
        let second_name = stage_name(&second);
        second.stdin(Stdio::from(pipe));
        let mut out = match Self::spawn_with_stdin_set(second, install_hint, None) {
            Ok(out) => out,
            Err(e) => {
                let mut head = head;
                head.child.kill_and_reap();
                return Err(e);
            }
        };
        if let (Some(ping), Some(stdin)) = (ping, &control) {
            ping.start(stdin, &head.name);
        }
        out.control = control;
        out.tool = second_name;
        out.upstream.push(head);
        Ok(out)
    }

    /// [`ChildOutput::spawn`] for a command whose stdin is already wired.
    fn spawn_with_stdin_set(
        mut cmd: Command,
        install_hint: &str,
        tap: Option<StderrTap>,
    ) -> Result<Self, SourceError> {
        let tool = cmd.get_program().to_string_lossy().into_owned();
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd
            .spawn()
            .map_err(|e| spawn_error(&tool, &e, install_hint))?;
        let stdout = child.stdout.take().ok_or_else(|| SourceError::Tool {
            tool: tool.clone(),
            message: "no stdout pipe".into(),
        })?;
        let stderr = child.stderr.take().map(|e| collect_stderr_tail(e, tap));
        Ok(Self {
            tool,
            child: TrackedChild::new(child),
            stdout: BufReader::with_capacity(BUF_BYTES, stdout),
            stderr,
            upstream: Vec::new(),
            finished: false,
            stderr_tail: StderrTail::default(),
            control: None,
        })
    }

    /// A handle to the tool's stderr tail, set once its output has ended. Tools print their
    /// end-of-run summary there (perf script: how many samples the kernel lost in all).
    pub fn stderr_tail(&self) -> StderrTail {
        self.stderr_tail.clone()
    }

    /// The process id of the last stage, for logs. Never signal it directly: once the
    /// tool is reaped the pid may name another process; [`ChildOutput::stopper`] is safe.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Reaps the child (and the earlier stages) once its output ended; an error naming
    /// each stage that failed, with its stderr, if any did.
    fn finish(&mut self) -> io::Result<()> {
        if self.finished {
            return Ok(());
        }
        self.finished = true;
        let status = self.child.wait()?;
        let stderr = self
            .stderr
            .take()
            .map(StderrCollector::join)
            .unwrap_or_default();
        // Set before the exit checks: a failed tool's summary is still worth reading.
        let _ = self.stderr_tail.set(stderr);
        let stopped = self.child.stopped_by_us(status);
        let failed = !status.success() && !stopped;
        // An earlier stage's own failure first: it is what broke the later ones' input.
        let (mut failures, remarks) = self.reap_upstream(failed)?;
        if stopped {
            tracing::debug!(tool = %self.tool, "stopped as asked");
        } else if failed {
            let stderr: &[u8] = self.stderr_tail.get().map_or(&[], Vec::as_slice);
            failures.push(failure(&self.tool, status, stderr));
        }
        failures.extend(remarks);
        if failures.is_empty() {
            Ok(())
        } else {
            Err(io::Error::other(failures.join("; ")))
        }
    }

    /// Reaps the earlier stages of a pipeline whose last stage has ended; `failed`: it
    /// ended by failing. Nothing reads their output any more: an idle one would never
    /// notice (see [`UPSTREAM_GRACE`]), so they are stopped at once after a failure, else
    /// after the grace. Returns how each that failed on its own failed, and what those
    /// stopped after a failure said (it may tell the cause).
    fn reap_upstream(&mut self, failed: bool) -> io::Result<(Vec<String>, Vec<String>)> {
        let (mut failures, mut remarks) = (Vec::new(), Vec::new());
        if self.upstream.is_empty() {
            return Ok((failures, remarks));
        }
        let stopper = self.stopper();
        let watchdog = if failed {
            stopper.terminate();
            None
        } else {
            stop_after(stopper, UPSTREAM_GRACE, &self.tool)
        };
        for stage in &mut self.upstream {
            let status = stage.child.wait()?;
            let stderr = stage
                .stderr
                .take()
                .map(|c| c.join_within(UPSTREAM_STDERR_WAIT))
                .unwrap_or_default();
            if stage.child.stopped_by_us(status) {
                tracing::debug!(tool = %stage.name, "stopped as asked");
                if failed && !stderr.trim_ascii().is_empty() {
                    remarks.push(format!(
                        "{} (stopped) said: {}",
                        stage.name,
                        summarize_stderr(&stderr)
                    ));
                }
            } else if !status.success() {
                failures.push(failure(&stage.name, status, &stderr));
            }
        }
        // Dropped: the watchdog stands down (a stage already reaped is never signalled).
        drop(watchdog);
        Ok((failures, remarks))
    }
}

/// How stage `tool` failed, with the useful part of its stderr.
fn failure(tool: &str, status: std::process::ExitStatus, stderr: &[u8]) -> String {
    let said = summarize_stderr(stderr);
    if said.is_empty() {
        format!("{tool} failed ({status})")
    } else {
        format!("{tool} failed ({status}): {said}")
    }
}

/// Terminates what `stopper` stops unless the returned sender is dropped within `grace`
/// (see [`UPSTREAM_GRACE`]); `after` names the stage whose end started the wait. At once
/// if no thread can wait: a stop is better than a hang.
fn stop_after(
    stopper: ChildStopper,
    grace: Duration,
    after: &str,
) -> Option<std::sync::mpsc::Sender<()>> {
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let after = after.to_owned();
    let stages = stopper.clone();
    let spawned = std::thread::Builder::new()
        .name("faultline-reap".into())
        .spawn(move || {
            let timed_out = matches!(
                wait.recv_timeout(grace),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout)
            );
            if timed_out && stages.terminate() > 0 {
                tracing::warn!(
                    "{after} ended but the stages feeding it still ran after {grace:?}: stopped them"
                );
            }
        });
    match spawned {
        Ok(_) => Some(done),
        Err(_) => {
            stopper.terminate();
            None
        }
    }
}

impl Read for ChildOutput {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.stdout.read(buf)?;
        if n == 0 && !buf.is_empty() {
            self.finish()?;
        }
        Ok(n)
    }
}

impl BufRead for ChildOutput {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.stdout.fill_buf()?.is_empty() {
            self.finish()?;
        }
        self.stdout.fill_buf()
    }
    fn consume(&mut self, amt: usize) {
        self.stdout.consume(amt);
    }
}

impl ChildOutput {
    /// Stops the processes producing the data: the first stage of a pipeline (`perf
    /// record` of `perf record | perf script`), else the tool itself. Stopping a live
    /// capture means terminating them: a reader blocked on a quiet tool never sees a stop
    /// flag, and the later stages then drain what was captured and end the stream. A
    /// process already reaped is never signalled (its pid may be reused).
    pub fn stopper(&self) -> ChildStopper {
        if self.upstream.is_empty() {
            self.child.stopper()
        } else {
            ChildStopper::join(self.upstream.iter().map(|s| s.child.stopper()))
        }
    }
}

impl Drop for ChildOutput {
    fn drop(&mut self) {
        if !self.finished {
            // Stopping early (shutdown, error): don't leave the tool running or a zombie.
            self.child.kill_and_reap();
            for stage in &mut self.upstream {
                stage.child.kill_and_reap();
            }
        }
    }
}

/// A pipeline stage's name in messages: its program, and its subcommand when the first
/// argument is one (`perf record`, `perf script`: both stages run `perf`).
fn stage_name(cmd: &Command) -> String {
    let program = cmd.get_program().to_string_lossy();
    let subcommand = cmd.get_args().next().and_then(|a| a.to_str()).filter(|a| {
        a.bytes().next().is_some_and(|c| c.is_ascii_alphabetic())
            && a.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
    });
    match subcommand {
        Some(sub) => format!("{program} {sub}"),
        None => program.into_owned(),
    }
}

/// A failed start, with the install hint when the tool is missing.
fn spawn_error(tool: &str, e: &io::Error, install_hint: &str) -> SourceError {
    SourceError::Tool {
        tool: tool.to_string(),
        message: if e.kind() == io::ErrorKind::NotFound {
            format!("not found in PATH ({install_hint})")
        } else {
            format!("cannot start: {e}")
        },
    }
}

/// A thread collecting a child's stderr, keeping only its last [`STDERR_TAIL_BYTES`].
struct StderrCollector {
    tail: Arc<Mutex<Vec<u8>>>,
    thread: std::thread::JoinHandle<()>,
}

impl StderrCollector {
    /// The tail once the stream has closed (every holder of its write end has exited).
    fn join(self) -> Vec<u8> {
        let _ = self.thread.join();
        take_tail(&self.tail)
    }

    /// The tail once the stream has closed, or what came until `wait` has passed: a
    /// stream inherited by a process that outlives the tool must not block the reaping.
    fn join_within(self, wait: Duration) -> Vec<u8> {
        let deadline = Instant::now() + wait;
        while !self.thread.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if self.thread.is_finished() {
            return self.join();
        }
        take_tail(&self.tail)
    }
}

fn take_tail(tail: &Mutex<Vec<u8>>) -> Vec<u8> {
    std::mem::take(&mut *tail.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Collects a child's stderr on a thread (see [`StderrCollector`]), passing each line to
/// `tap` too.
fn collect_stderr_tail(
    mut err: std::process::ChildStderr,
    mut tap: Option<StderrTap>,
) -> StderrCollector {
    let tail = Arc::new(Mutex::new(Vec::new()));
    let shared = tail.clone();
    let thread = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        let mut lines = LineSplitter::default();
        while let Ok(n) = err.read(&mut buf) {
            let Some(chunk) = buf.get(..n).filter(|c| !c.is_empty()) else {
                break;
            };
            if let Some(tap) = tap.as_mut() {
                lines.feed(chunk, tap);
            }
            let mut tail = shared.lock().unwrap_or_else(|e| e.into_inner());
            tail.extend_from_slice(chunk);
            if tail.len() > STDERR_TAIL_BYTES {
                let cut = tail.len() - STDERR_TAIL_BYTES;
                tail.drain(..cut);
            }
        }
        if let Some(tap) = tap.as_mut() {
            lines.finish(tap);
        }
    });
    StderrCollector { tail, thread }
}

/// Splits a byte stream into lines for a [`StderrTap`], each cut at [`STDERR_LINE_BYTES`].
#[derive(Default)]
struct LineSplitter {
    line: Vec<u8>,
    /// The current line passed the cap: the rest of it is skipped.
    cut: bool,
}

impl LineSplitter {
    fn feed(&mut self, mut chunk: &[u8], tap: &mut StderrTap) {
        while !chunk.is_empty() {
            let end = memchr::memchr(b'\n', chunk);
            let part = chunk.get(..end.unwrap_or(chunk.len())).unwrap_or_default();
            if !self.cut {
                let room = STDERR_LINE_BYTES - self.line.len();
                self.line
                    .extend_from_slice(part.get(..part.len().min(room)).unwrap_or_default());
                self.cut = part.len() > room;
            }
            match end {
                Some(i) => {
                    tap(&self.line);
                    self.line.clear();
                    self.cut = false;
                    chunk = chunk.get(i + 1..).unwrap_or_default();
                }
                None => break,
            }
        }
    }

    /// The last line, if the stream did not end with a newline.
    fn finish(&mut self, tap: &mut StderrTap) {
        if !self.line.is_empty() {
            tap(&self.line);
            self.line.clear();
        }
    }
}

/// The useful part of a tool's stderr on one line: babeltrace2 prints pages of log lines
/// before its `ERROR:` summary, which is what the user needs.
fn summarize_stderr(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let from = text.find("ERROR:").unwrap_or(0);
    let joined = text
        .get(from..)
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if joined.chars().count() > 1000 {
        joined.chars().take(1000).collect::<String>() + " …"
    } else {
        joined
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn read_all(mut r: Box<dyn BufRead + Send>) -> Vec<u8> {
        let mut v = Vec::new();
        r.read_to_end(&mut v).unwrap();
        v
    }

    #[test]
    fn a_stderr_tap_sees_every_line_while_stdout_is_read() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::<Vec<u8>>::new()));
        let tap: StderrTap = {
            let seen = seen.clone();
            Box::new(move |line: &[u8]| seen.lock().unwrap().push(line.to_vec()))
        };
        // Lines split over several writes, one longer than a tap sees whole, and a last
        // one without a newline.
        let script = "printf 'WARN' >&2; printf 'ING: one\\n' >&2; echo out; \
                      head -c 9000 /dev/zero | tr '\\0' x >&2; printf '\\nlast' >&2";
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]);
        let mut child = ChildOutput::spawn_tapped(cmd, "", tap).unwrap();
        let mut out = String::new();
        child.read_to_string(&mut out).unwrap();
        assert_eq!(out, "out\n");
        let seen = seen.lock().unwrap();
        let lens: Vec<usize> = seen.iter().map(Vec::len).collect();
        assert_eq!(lens, vec![12, STDERR_LINE_BYTES, 4]);
        assert_eq!(seen[0], b"WARNING: one");
        assert!(seen[1].iter().all(|&c| c == b'x'));
        assert_eq!(seen[2], b"last");
    }

    #[test]
    fn plain_zstd_and_gzip_read_back_the_same_text() {
        let text = b"line one\nline two\n".repeat(100);
        let dir = tempfile::tempdir().unwrap();

        let plain = dir.path().join("t.txt");
        std::fs::write(&plain, &text).unwrap();

        let zst = dir.path().join("t.txt.zst");
        std::fs::write(&zst, zstd::encode_all(&text[..], 3).unwrap()).unwrap();

        // Gzip under a misleading name: the magic bytes decide.
        let gz = dir.path().join("t.data");
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&text).unwrap();
        std::fs::write(&gz, enc.finish().unwrap()).unwrap();

        for p in [&plain, &zst, &gz] {
            assert_eq!(read_all(open(p).unwrap()), text, "{}", p.display());
        }
    }

    #[test]
    fn counter_counts_raw_bytes() {
        let text = b"x".repeat(10_000);
        let dir = tempfile::tempdir().unwrap();
        let zst = dir.path().join("t.zst");
        let compressed = zstd::encode_all(&text[..], 3).unwrap();
        std::fs::write(&zst, &compressed).unwrap();
        let (r, counter) = open_counted(&zst).unwrap();
        assert_eq!(read_all(r).len(), text.len());
        assert_eq!(counter.get(), compressed.len() as u64);
    }

    #[test]
    fn missing_file_is_an_io_error_naming_the_path() {
        let err = open(Path::new("/nonexistent/faultline.txt")).err().unwrap();
        assert!(err.to_string().contains("/nonexistent/faultline.txt"));
    }

    #[test]
    fn corrupt_zstd_fails_on_read_not_panic() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.zst");
        std::fs::write(&p, [0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3, 4, 5]).unwrap();
        let mut r = open(&p).unwrap();
        let mut v = Vec::new();
        assert!(r.read_to_end(&mut v).is_err());
    }

    #[test]
    fn empty_file_is_empty_text() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("empty.zst");
        std::fs::write(&p, b"").unwrap();
        assert!(read_all(open(&p).unwrap()).is_empty());
    }
    #[test]
    fn child_output_streams_and_reports_failure() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo hello; echo oops >&2; exit 3"]);
        let mut out = ChildOutput::spawn(cmd, "sh").unwrap();
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "hello\n");
        let err = out.read_line(&mut line).unwrap_err();
        assert!(err.to_string().contains("oops"), "{err}");
    }

    #[test]
    fn a_tool_we_stopped_ends_its_output_cleanly() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo hello; exec sleep 30"]);
        let mut out = ChildOutput::spawn(cmd, "sh").unwrap();
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(out.stopper().terminate(), 1);
        line.clear();
        assert_eq!(out.read_line(&mut line).unwrap(), 0, "a clean end");
        // Reaped now: a second stop signals nothing.
        assert_eq!(out.stopper().terminate(), 0);
    }

    #[test]
    fn a_pipeline_whose_producer_we_stopped_ends_cleanly() {
        let mut first = Command::new("sh");
        first.args(["-c", "echo hello; exec sleep 30"]);
        let mut out = ChildOutput::spawn_pipe(first, Command::new("cat"), "sh").unwrap();
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "hello\n");
        assert_eq!(out.stopper().terminate(), 1);
        let mut rest = String::new();
        out.read_to_string(&mut rest).unwrap();
        assert_eq!(rest, "");
    }

    #[test]
    fn a_producer_killed_by_someone_else_still_fails() {
        let mut first = Command::new("sh");
        first.args(["-c", "echo hello; kill -TERM $$"]);
        let mut out = ChildOutput::spawn_pipe(first, Command::new("cat"), "sh").unwrap();
        let mut all = String::new();
        let err = out.read_to_string(&mut all).unwrap_err();
        assert!(err.to_string().contains("signal: 15"), "{err}");
    }

    #[test]
    fn missing_tool_is_a_clear_error() {
        let err = ChildOutput::spawn(Command::new("faultline-no-such-tool"), "apt install x")
            .err()
            .unwrap();
        assert!(
            err.to_string()
                .contains("not found in PATH (apt install x)"),
            "{err}"
        );
    }
    /// A pipe that hands out one byte per read, like a slow writer.
    struct Trickle(Vec<u8>, usize);
    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            match (self.0.get(self.1), buf.first_mut()) {
                (Some(b), Some(slot)) => {
                    *slot = *b;
                    self.1 += 1;
                    Ok(1)
                }
                _ => Ok(0),
            }
        }
    }

    #[test]
    fn slow_pipe_still_recognises_zstd() {
        let text = b"hello\n".repeat(50);
        let z = zstd::encode_all(&text[..], 3).unwrap();
        let (r, counter) = wrap(Box::new(Trickle(z.clone(), 0)), "").unwrap();
        assert_eq!(read_all(r), text);
        assert_eq!(counter.get(), z.len() as u64);
    }

    #[test]
    fn formats_are_sniffed_from_real_line_shapes() {
        let perf =
            b"        mariadbd 11841/11874  2617.980260265:  raw_syscalls:sys_exit: NR 7 = 1\n";
        let trace = b"   884666.297 ( 0.005 ms): ls/12973 mmap(len: 8192) = 0x7f\n";
        let bt =
            b"[1457113582.794575646] wilbrod syscall_entry_ioctl: { cpu_id = 5 }, { fd = 23 }\n";
        assert_eq!(TraceFormat::sniff(perf), Some(TraceFormat::PerfScript));
        assert_eq!(TraceFormat::sniff(trace), Some(TraceFormat::PerfTrace));
        assert_eq!(TraceFormat::sniff(bt), Some(TraceFormat::BabeltraceText));
        assert_eq!(TraceFormat::sniff(b"hello\nworld\n"), None);
        let tcp = b"nginx 1/1 2.5: faultline:tcp_segments: sent=1 retransmitted=0\n";
        assert_eq!(TraceFormat::sniff(tcp), Some(TraceFormat::PerfScript));
    }

    /// A `perf script` file of a busy machine: scheduler records fill the first lines.
    #[test]
    fn a_perf_script_file_starting_with_scheduler_records_is_recognised() {
        let mut text = String::new();
        for i in 0..15u32 {
            text += &format!(
                "  postgres  2474/2474 [001] 70400.{i:06}: sched:sched_stat_runtime: comm=postgres pid=2474 runtime=33043 [ns]\n\
                 \x20 postgres  2474/2474 [001] 70400.{i:06}: sched:sched_switch: prev_comm=postgres prev_pid=2474 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120\n"
            );
        }
        text +=
            "  postgres  2474/2474 [001] 70401.000001: raw_syscalls:sys_enter: NR 0 (3, 0, 0)\n\
                 \x20 postgres  2474/2474 [001] 70401.000002: raw_syscalls:sys_exit: NR 0 = 1\n";
        assert_eq!(
            TraceFormat::sniff(text.as_bytes()),
            Some(TraceFormat::PerfScript)
        );
        // Other perf events (a sample of another counter, a loss record) say it too, and
        // no `perf trace` line passes for one.
        for line in [
            "bash 10/10 1.000001: sched:sched_wakeup: comm=x pid=3 prio=120 target_cpu=001\n",
            "bash 10/10 1.000001: 20000 branch-misses: ffffffff81000000 x ([kernel.kallsyms])\n",
            "bash 10/10 1.000001: PERF_RECORD_LOST lost 5\n",
        ] {
            assert_eq!(
                TraceFormat::sniff(line.as_bytes()),
                Some(TraceFormat::PerfScript),
                "{line}"
            );
        }
        for line in [
            "LOST 2412 events!\n",
            "     0.770 (         ): sh/12976 vfork()            ...\n",
            "         ? (         ): sh/12976  ... [continued]: execve())   = 0\n",
        ] {
            assert_ne!(
                TraceFormat::sniff(line.as_bytes()),
                Some(TraceFormat::PerfScript),
                "{line}"
            );
        }

        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("busy.txt");
        std::fs::write(&p, &text).unwrap();
        let stats = Arc::new(crate::pipeline::telemetry::SourceStats::new("perf"));
        let mut r = open_trace(&p, faultline_engine::syscalls::Arch::X86_64, stats.clone())
            .expect("recognised as perf script");
        let mut kinds = std::collections::BTreeMap::new();
        while let Some(b) = r.next_batch().unwrap() {
            for e in &b.events {
                *kinds.entry(format!("{:?}", e.kind)).or_insert(0) += 1;
            }
        }
        assert_eq!(stats.decode_errors(), 0);
        assert_eq!(kinds.get("Enter"), Some(&1));
        assert_eq!(kinds.get("Exit"), Some(&1));
        assert_eq!(kinds.values().sum::<i32>(), 32, "{kinds:?}");
    }

    /// A directory with `perf` (a link to `sh`) and the scripts its subcommands run, so
    /// pipeline stages are named as the real ones are (`…/perf record`).
    fn fake_perf(record: &str, script: &str) -> (tempfile::TempDir, Command, Command) {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/bin/sh", dir.path().join("perf")).unwrap();
        // Read by sh as scripts, never executed: no "text file busy" from a parallel fork.
        std::fs::write(dir.path().join("record"), record).unwrap();
        std::fs::write(dir.path().join("script"), script).unwrap();
        let stage = |sub| {
            let mut cmd = Command::new(dir.path().join("perf"));
            cmd.arg(sub).current_dir(dir.path());
            cmd
        };
        let (first, second) = (stage("record"), stage("script"));
        (dir, first, second)
    }

    /// `perf script` dying on its own while `perf record` idles (a quiet target): the
    /// recorder never writes, so never sees EPIPE; the end must not wait on it.
    #[test]
    fn a_last_stage_failing_on_its_own_stops_the_idle_first_and_names_itself() {
        // The first stage's stderr line comes before its stdout line, which the last
        // stage waits for: what it said is surely in.
        let (_dir, record, script) = fake_perf(
            "echo 'waiting for events' >&2; echo ready; exec sleep 30\n",
            "read line; echo 'cannot parse header' >&2; exit 3\n",
        );
        let started = Instant::now();
        let mut out = ChildOutput::spawn_pipe(record, script, "sh").unwrap();
        let mut all = String::new();
        let err = out.read_to_string(&mut all).unwrap_err().to_string();
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "{:?}",
            started.elapsed()
        );
        // It was stopped by us: that is no failure of its own, but what it said may tell
        // why the last stage failed.
        assert!(
            err.contains("perf script failed (exit status: 3): cannot parse header; ")
                && err.ends_with("perf record (stopped) said: waiting for events"),
            "{err}"
        );
        assert!(!err.contains("perf record failed"), "{err}");
        assert_eq!(out.stopper().terminate(), 0, "reaped");
    }

    /// The same with a clean end: the idle first stage is stopped after the grace.
    #[test]
    fn a_last_stage_ending_cleanly_on_its_own_does_not_hang_on_the_first() {
        let (_dir, record, script) = fake_perf("exec sleep 30\n", "echo done\n");
        let started = Instant::now();
        let mut out = ChildOutput::spawn_pipe(record, script, "sh").unwrap();
        let mut all = String::new();
        out.read_to_string(&mut all).unwrap();
        assert_eq!(all, "done\n");
        let took = started.elapsed();
        assert!(
            took >= UPSTREAM_GRACE && took < UPSTREAM_GRACE + Duration::from_secs(5),
            "{took:?}"
        );
    }

    #[test]
    fn a_failing_first_stage_is_named_with_its_stderr() {
        let (_dir, record, script) = fake_perf(
            "echo 'Error: perf_event_open: Permission denied' >&2; exit 255\n",
            "exec cat\n",
        );
        let mut out = ChildOutput::spawn_pipe(record, script, "sh").unwrap();
        let mut all = String::new();
        let err = out.read_to_string(&mut all).unwrap_err().to_string();
        assert!(
            err.contains(
                "perf record failed (exit status: 255): Error: perf_event_open: Permission denied"
            ),
            "{err}"
        );
        assert!(!err.contains("perf script failed"), "{err}");
    }

    #[test]
    fn stages_are_named_by_program_and_subcommand() {
        let mut perf = Command::new("perf");
        perf.args(["record", "-q"]);
        assert_eq!(stage_name(&perf), "perf record");
        let mut sh = Command::new("sh");
        sh.args(["-c", "true"]);
        assert_eq!(stage_name(&sh), "sh");
        assert_eq!(stage_name(Command::new("sleep").arg("30")), "sleep");
        assert_eq!(stage_name(&Command::new("cat")), "cat");
    }

    #[test]
    fn open_trace_rejects_unknown_text() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("notes.txt");
        std::fs::write(&p, b"just some notes\n").unwrap();
        let stats = Arc::new(crate::pipeline::telemetry::SourceStats::new("perf"));
        let err = open_trace(&p, faultline_engine::syscalls::Arch::X86_64, stats)
            .err()
            .unwrap();
        assert!(err.to_string().contains("not a recognised trace"), "{err}");
    }
}
