//! The offline path shared by `analyze` and `calibrate`: open a recorded trace, route
//! its batches to targets and feed them through an engine, with a progress bar.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use faultline_engine::syscalls::Arch;
use faultline_engine::{Params, Report};
use indicatif::{ProgressBar, ProgressStyle};

use crate::config::TargetConfig;
use crate::engine_host::{build_host, EngineHost, EngineKind, HostConfig};
use crate::pipeline::engine_task::ENGINE_WARN_EVERY;
use crate::pipeline::router::Router;
use crate::pipeline::telemetry::{DropReason, Telemetry};
use crate::pipeline::warn_limit::WarnLimit;
use crate::sources::input::open_trace;
use crate::sources::perf::{PerfScriptReader, PerfTraceReader};
use crate::sources::BatchReader;

/// Inputs below this size get no progress bar (it would only flicker).
const PROGRESS_MIN_BYTES: u64 = 8 << 20;

/// Where a recorded trace comes from: `SOURCE:PATH`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputSpec {
    pub kind: InputKind,
    pub path: PathBuf,
}

/// Recorded-trace formats `analyze` and `calibrate` read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    /// `perf script` text of `raw_syscalls:sys_enter`/`sys_exit`.
    Perf,
    /// `perf trace` output (whole calls with durations).
    PerfTrace,
    /// An LTTng kernel trace (CTF directory or `net://` live session), decoded by babeltrace2.
    Lttng,
    /// Whatever the path holds: a directory is LTTng, a file is sniffed.
    Auto,
}

impl std::str::FromStr for InputSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (kind, path) = s
            .split_once(':')
            .ok_or_else(|| format!("expected SOURCE:PATH (e.g. perf:trace.txt.zst), got `{s}`"))?;
        let kind = match kind {
            "perf" | "perf-script" => InputKind::Perf,
            "perf-trace" => InputKind::PerfTrace,
            "lttng" | "ctf" => InputKind::Lttng,
            "auto" => InputKind::Auto,
            other => {
                return Err(format!(
                    "unknown source `{other}`: expected perf, perf-trace, lttng or auto"
                ))
            }
        };
        if path.is_empty() {
            return Err("the PATH after SOURCE: is empty".into());
        }
        Ok(Self {
            kind,
            path: PathBuf::from(path),
        })
    }
}

/// Options common to the offline commands.
#[derive(Debug, clap::Args)]
pub struct OfflineArgs {
    /// The trace: `perf:FILE` (perf script text), `perf-trace:FILE`, `lttng:DIR` (CTF, via babeltrace2)
    /// or `auto:PATH`; files may be `.zst`/`.gz`, `-` is stdin.
    #[arg(long, short)]
    pub input: InputSpec,
    /// Analyse only processes with this command name (repeatable); default: each process name is its own target.
    #[arg(long = "target", short = 't')]
    pub targets: Vec<String>,
    /// Architecture whose syscall numbers the trace carries (perf prints numbers).
    #[arg(long, default_value = "x86_64", value_parser = parse_arch)]
    pub arch: Arch,
    /// Analysis parameters as a TOML/JSON file with the keys of `[analysis]` (see config/faultline.toml).
    #[arg(long)]
    pub params: Option<PathBuf>,
    /// Override one analysis parameter, `KEY=VALUE` (repeatable), e.g. `--set alpha_seconds=0.8`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// Never draw a progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// How to host the engine: `native` (fastest; the default offline) or `wasm` (the sandbox `run` uses by default).
    #[arg(long, default_value = "native", value_parser = parse_engine)]
    pub engine: EngineKind,
}

fn parse_engine(s: &str) -> Result<EngineKind, String> {
    match s {
        "native" => Ok(EngineKind::Native),
        "wasm" => Ok(EngineKind::Wasm),
        other => Err(format!("unknown engine `{other}` (native, wasm)")),
    }
}

/// The engine host an offline command asked for, with `params` as the default parameters.
pub fn build_engine(
    args: &OfflineArgs,
    params: Params,
    telemetry: &Arc<Telemetry>,
) -> anyhow::Result<Box<dyn EngineHost>> {
    let config = HostConfig {
        kind: args.engine,
        ..HostConfig::default()
    };
    build_host(&config, params, telemetry.clone()).context("starting the analysis engine")
}

fn parse_arch(s: &str) -> Result<Arch, String> {
    crate::sources::perf::parse_arch(s)
        .ok_or_else(|| format!("unknown architecture `{s}` (x86_64, aarch64)"))
}

/// Loads `[analysis]`-style parameters from `--params` and `--set`, validated.
pub fn load_params(args: &OfflineArgs) -> anyhow::Result<Params> {
    let mut value = match &args.params {
        Some(path) => read_params_file(path)?,
        None => serde_json::to_value(Params::default())?,
    };
    for kv in &args.overrides {
        let (k, v) = kv
            .split_once('=')
            .with_context(|| format!("--set expects KEY=VALUE, got `{kv}`"))?;
        let obj = value
            .as_object_mut()
            .context("parameters must be a table")?;
        // Numbers and booleans as such, anything else as a string, so serde reports type errors by key.
        let parsed =
            serde_json::from_str(v).unwrap_or_else(|_| serde_json::Value::String(v.to_string()));
        obj.insert(k.trim().to_string(), parsed);
    }
    // Through serde_path_to_error so a wrong type names its key (`alpha_seconds: invalid
    // type …`), as `[analysis]` errors in a config file do.
    let params: Params = serde_path_to_error::deserialize(value).map_err(|e| {
        let key = e.path().to_string();
        anyhow::anyhow!("invalid analysis parameter `{key}`: {}", e.into_inner())
    })?;
    params.validate()?;
    Ok(params)
}

fn read_params_file(path: &Path) -> anyhow::Result<serde_json::Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value: serde_json::Value = if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?
    } else {
        let parsed = config::Config::builder()
            .add_source(config::File::from_str(&text, config::FileFormat::Toml))
            .build()
            .with_context(|| format!("parsing {}", path.display()))?;
        // Accept both a bare parameter table and a full faultline config with `[analysis]`.
        let analysis = parsed.get::<serde_json::Value>("analysis").ok();
        match analysis {
            Some(v) => v,
            None => parsed
                .try_deserialize()
                .with_context(|| format!("parsing {}", path.display()))?,
        }
    };
    Ok(value)
}

/// Opens the reader for `spec`; its counters land in `telemetry`.
pub fn open_reader(
    spec: &InputSpec,
    arch: Arch,
    telemetry: &Telemetry,
) -> anyhow::Result<Box<dyn BatchReader>> {
    let what = || format!("opening {}", spec.path.display());
    match spec.kind {
        InputKind::Perf => {
            let stats = telemetry.source(crate::sources::perf::script::SOURCE);
            let reader = PerfScriptReader::open(&spec.path, arch, stats).with_context(what)?;
            Ok(Box::new(reader))
        }
        InputKind::Lttng => {
            let stats = telemetry.source(crate::sources::lttng::reader::SOURCE);
            let input = spec.path.to_str().context("the LTTng path is not UTF-8")?;
            Ok(Box::new(
                crate::sources::lttng::open(input, arch, stats).with_context(what)?,
            ))
        }
        // Opened as said, not sniffed: the user named the format, and a file whose first
        // lines the sniffer does not know is still read.
        InputKind::PerfTrace => {
            let stats = telemetry.source(crate::sources::perf::trace::SOURCE);
            let reader = PerfTraceReader::open(&spec.path, stats).with_context(what)?;
            Ok(Box::new(reader))
        }
        InputKind::Auto => {
            let name = if spec.path.is_dir() {
                crate::sources::lttng::reader::SOURCE
            } else {
                crate::sources::perf::script::SOURCE
            };
            Ok(open_trace(&spec.path, arch, telemetry.source(name)).with_context(what)?)
        }
    }
}

/// The router of an offline run: `--target NAME` selects processes named NAME; without it,
/// each process name becomes its own target (as `faultline run` does with no `[[targets]]`).
pub fn router(only: &[String], max_targets: usize) -> Router {
    let targets: Vec<TargetConfig> = only
        .iter()
        .map(|name| TargetConfig {
            name: name.clone(),
            process_names: vec![name.clone()],
            ..TargetConfig::default()
        })
        .collect();
    Router::new(&targets, max_targets).without_eviction()
}

/// Feeds the whole input through `engine`, collecting continuous-mode reports as they
/// come; the caller decides what ends the stream (finish, trigger, calibrate).
pub fn drive(
    args: &OfflineArgs,
    engine: &mut dyn EngineHost,
    telemetry: &Telemetry,
    max_targets: usize,
) -> anyhow::Result<(Vec<String>, Vec<Report>, u64)> {
    let mut reader = open_reader(&args.input, args.arch, telemetry)?;
    let total = std::fs::metadata(&args.input.path)
        .map(|m| m.len())
        .unwrap_or(0);
    let progress = progress_bar(total, args.no_progress);
    let mut router = router(&args.targets, max_targets);
    let mut targets = std::collections::BTreeSet::new();
    let mut reports = Vec::new();
    let mut events = 0u64;
    let mut lost = 0u64;
    let mut warnings = WarnLimit::new(ENGINE_WARN_EVERY);
    while let Some(batch) = reader.next_batch().context("reading the trace")? {
        // The time is unused: this router never evicts.
        match router
            .route(&batch.process, std::time::Instant::now())
            .map(|r| r.target)
        {
            Ok(target) => {
                events += batch.events.len() as u64;
                if !targets.contains(&*target) {
                    targets.insert(target.to_string());
                }
                // A guest trap loses this batch (the host restarts the guest): count it as
                // `faultline run` does, say so (rate-limited), go on.
                if let Err(e) = engine.ingest(&target, &batch.events) {
                    let n = batch.events.len() as u64;
                    telemetry
                        .source(batch.source)
                        .add_dropped(DropReason::EngineError, n);
                    if let Some(suppressed) = warnings.occurred(std::time::Instant::now()) {
                        tracing::warn!(error = %e, events = n, suppressed, "engine rejected a batch");
                    }
                    lost += n;
                }
                reports.extend(engine.take_reports()?);
            }
            Err(reason) => telemetry
                .source(batch.source)
                .add_dropped(reason, batch.events.len() as u64),
        }
        if let Some(p) = &progress {
            p.set_position(reader.bytes_read());
        }
    }
    if let Some(p) = progress {
        p.finish_and_clear();
    }
    if lost > 0 {
        tracing::warn!(lost, "events lost to engine errors");
    }
    Ok((targets.into_iter().collect(), reports, events))
}

fn progress_bar(total: u64, disabled: bool) -> Option<ProgressBar> {
    use std::io::IsTerminal;
    if disabled || total < PROGRESS_MIN_BYTES || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::new(total);
    let style = ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta})")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    Some(bar)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::test_support::FailingIngest;

    #[test]
    fn a_parameter_of_the_wrong_type_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("params.toml");
        std::fs::write(&file, "alpha_seconds = \"soon\"\n").unwrap();
        let mut args = OfflineArgs {
            input: InputSpec {
                kind: InputKind::Perf,
                path: dir.path().join("trace.txt"),
            },
            targets: Vec::new(),
            arch: Arch::X86_64,
            params: None,
            overrides: vec!["beta_seconds=fast".into()],
            no_progress: true,
            engine: EngineKind::Native,
        };
        let err = load_params(&args)
            .expect_err("a string for a number")
            .to_string();
        assert!(err.contains("`beta_seconds`"), "{err}");
        args.overrides.clear();
        args.params = Some(file);
        let err = load_params(&args)
            .expect_err("a string for a number")
            .to_string();
        assert!(err.contains("`alpha_seconds`"), "{err}");
    }

    /// `perf-trace:` opens the `perf trace` reader as said, without sniffing: a file whose
    /// first lines the sniffer does not know (here, a burst of losses) is still read.
    #[test]
    fn perf_trace_input_is_read_as_perf_trace_without_sniffing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.txt");
        let mut text = "LOST 3 events!\n".repeat(25);
        text += "   884666.297 ( 0.005 ms): ls/12973 read(fd: 3) = 1\n";
        std::fs::write(&path, text).unwrap();
        let spec = |kind| InputSpec {
            kind,
            path: path.clone(),
        };
        let telemetry = Telemetry::default();
        let mut reader = open_reader(&spec(InputKind::PerfTrace), Arch::X86_64, &telemetry)
            .expect("opened as perf trace");
        let mut events = Vec::new();
        while let Some(batch) = reader.next_batch().unwrap() {
            events.extend(batch.events.iter().map(|e| (e.kind, e.duration_ns)));
        }
        assert_eq!(events, [(faultline_engine::EventKind::Complete, 5_000)]);
        let perf = telemetry.source(crate::sources::perf::trace::SOURCE);
        assert_eq!(perf.dropped(DropReason::KernelLost), 75);

        let err = open_reader(&spec(InputKind::Auto), Arch::X86_64, &telemetry)
            .err()
            .expect("auto: sniffs, and knows no line here");
        assert!(
            format!("{err:#}").contains("not a recognised trace"),
            "{err:#}"
        );
    }

    #[test]
    fn batches_the_engine_fails_on_are_counted_as_engine_error_drops() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.txt");
        std::fs::write(
            &path,
            "dd 9/9 1.000000001: raw_syscalls:sys_enter: NR 0 (0)\n\
             dd 9/9 1.000000002: raw_syscalls:sys_exit: NR 0 = 1\n",
        )
        .unwrap();
        let args = OfflineArgs {
            input: InputSpec {
                kind: InputKind::Perf,
                path,
            },
            targets: Vec::new(),
            arch: Arch::X86_64,
            params: None,
            overrides: Vec::new(),
            no_progress: true,
            engine: EngineKind::Native,
        };
        let telemetry = Telemetry::default();
        let (_, _, events) = drive(&args, &mut FailingIngest, &telemetry, 4).unwrap();
        assert_eq!(events, 2);
        let perf = telemetry.source(crate::sources::perf::script::SOURCE);
        assert_eq!(perf.dropped(DropReason::EngineError), 2);
    }
}
