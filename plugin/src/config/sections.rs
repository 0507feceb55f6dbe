//! The section structs of the config file other than `[analysis]` and `[[targets]]`.
//! Every struct has defaults so a partial file (or none) works, and rejects unknown keys
//! so a typo is an error instead of a silently ignored setting.

use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::sinks::otlp::OtlpSinkConfig;
use crate::sources::otlp::OtlpSourceConfig;
use crate::sources::perf::live::CounterMode;

/// `[pipeline]`: the bounded hand-off between sources and the engine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PipelineConfig {
    /// Batches the engine queue holds (each at most 4096 events), bounding memory.
    pub queue_capacity: usize,
    /// With no events for this long (wall clock), the engine task drains pending reports.
    pub idle_seconds: f64,
    /// On SIGTERM, how long to wait for the queue to drain and the engine to finish.
    pub shutdown_timeout_seconds: f64,
    /// How long (wall clock) an on-demand trigger waits for its target's events to reach
    /// the alarm time, since live sources deliver seconds late; 0 answers at once.
    pub trigger_wait_seconds: f64,
    /// With live sources only: a target that sent no record for this long (wall clock)
    /// has its clock moved on by the time that passed, so it is still reported on
    /// (a frozen or hung service sends nothing); 0 turns it off.
    pub silent_after_seconds: f64,
    /// A target's OTLP batches wait until every process of it that sent in the last 10 s
    /// has sent past them, and go to the engine in time order: each process's SDK exports
    /// on its own schedule, and records of one target out of order across processes raise
    /// false verdicts. No process is waited for longer than this (event time) behind the
    /// target's newest record; 0 feeds OTLP batches as they come.
    pub reorder_seconds: f64,
    /// This host's name, where the kernel's is not the one its services report (faultline
    /// in a container): OTLP records of another `host.name` form targets of their own, and
    /// the OTLP push names its resource by it. Default: the kernel's (`hostname`).
    pub host_name: Option<String>,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        Self {
            queue_capacity: 256,
            idle_seconds: 5.0,
            shutdown_timeout_seconds: 10.0,
            trigger_wait_seconds: 10.0,
            silent_after_seconds: 20.0,
            reorder_seconds: 30.0,
            host_name: None,
        }
    }
}

/// `[sources]`: one sub-table per source kind.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SourcesConfig {
    pub otlp: OtlpSourceSection,
    pub perf: PerfSourceConfig,
    pub lttng: LttngSourceConfig,
    pub replay: ReplaySourceConfig,
}

/// `[sources.otlp]`: the OTLP receiver (gRPC 127.0.0.1:4317, HTTP 127.0.0.1:4318 by default).
///
/// `enabled` is ours; the other keys are the receiver's own [`OtlpSourceConfig`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Map<String, Value>")]
pub struct OtlpSourceSection {
    pub enabled: bool,
    #[serde(flatten)]
    pub receiver: OtlpSourceConfig,
}

impl Default for OtlpSourceSection {
    fn default() -> Self {
        Self {
            enabled: true,
            receiver: OtlpSourceConfig::default(),
        }
    }
}

/// `[sources.perf]`: live capture of running processes, a cgroup or a command by
/// `perf record -q … -k CLOCK_MONOTONIC -o - | perf script -i - --ns --show-lost-events`,
/// decoded as it streams (off by default because it needs privileges).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PerfSourceConfig {
    pub enabled: bool,
    /// Trace these processes (`perf record -p`).
    pub pids: Vec<u32>,
    /// Trace a whole cgroup (`perf record -a -G`), e.g. a container's.
    pub cgroup: Option<String>,
    /// Start and trace this command (argv), instead of attaching.
    pub command: Vec<String>,
    /// Also record each thread's CPU time and switches away from the CPU
    /// (`sched:sched_stat_runtime`, `sched:sched_switch`, when the kernel has them): a
    /// thread of the service burning a CPU then makes the verdict internal (see the
    /// engine's `burner_share`, `spinner_share`). On by default.
    pub cpu_time: bool,
    /// Also sample each thread's `cycles`, `instructions` and `cache-misses` (the
    /// engine's vital signs and symptoms such as `busy_loop`): `auto` (default) when this
    /// machine's PMU counts them, `on` to fail at startup when it cannot, `off`.
    pub counters: CounterMode,
    /// Also sample the TCP segments the traced processes' network namespace sent and
    /// retransmitted, once a second (`/proc/<pid>/net/snmp`): packet loss shows as
    /// retransmissions even when no call slows (a non-blocking server's sends return at
    /// once). With `pids` or `cgroup` only (not `command`); on by default.
    pub tcp_segments: bool,
}

impl Default for PerfSourceConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            pids: Vec::new(),
            cgroup: None,
            command: Vec::new(),
            cpu_time: true,
            counters: CounterMode::Auto,
            tcp_segments: true,
        }
    }
}

/// `[sources.lttng]`: an LTTng session read through babeltrace2 (off by default).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LttngSourceConfig {
    pub enabled: bool,
    /// Live session URL, e.g. `net://localhost/host/myhost/mysession`.
    pub relayd_url: Option<String>,
    /// Or a CTF trace directory to read once.
    pub trace_dir: Option<PathBuf>,
}

/// `[sources.replay]`: feed a recorded trace file as if it were live (demos, tests,
/// re-running an incident); off by default.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReplaySourceConfig {
    pub enabled: bool,
    /// The recorded trace (`.zst`/`.gz` read transparently).
    pub path: Option<PathBuf>,
    /// Its format: `perf` (`perf script` text of syscall tracepoints).
    pub format: ReplayFormat,
    /// Architecture whose syscall numbers the trace carries (`x86_64`, `aarch64`).
    pub arch: String,
}

impl Default for ReplaySourceConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            path: None,
            format: ReplayFormat::Perf,
            arch: "x86_64".to_owned(),
        }
    }
}

/// Formats `[sources.replay]` reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplayFormat {
    /// `perf script` text of `raw_syscalls:sys_enter`/`sys_exit` (or per-call tracepoints).
    #[default]
    Perf,
}

/// `[sinks]`: one sub-table per sink.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SinksConfig {
    pub prometheus: PrometheusSinkConfig,
    pub json: JsonSinkConfig,
    pub otlp: OtlpSinkSection,
}

/// `[sinks.prometheus]`: the HTTP endpoint with `/metrics`, `/report`, `/healthz`, `/trigger`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PrometheusSinkConfig {
    pub enabled: bool,
    /// `host:port` to listen on; loopback by default so nothing is exposed unasked.
    pub listen: String,
    /// Targets that get per-target series; reports of further targets are counted in
    /// `faultline_series_capped_total` and only shown in `/report` if space frees up.
    pub max_targets: usize,
    /// Syscalls exported per target and per list (ranking, latency/rate).
    pub max_syscalls: usize,
}

impl Default for PrometheusSinkConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            listen: "127.0.0.1:9464".to_owned(),
            max_targets: 64,
            max_syscalls: 20,
        }
    }
}

/// `[sinks.json]`: one JSON report per line, flushed per report (off by default).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JsonSinkConfig {
    pub enabled: bool,
    /// File to append to; stdout when absent or `-`.
    pub path: Option<PathBuf>,
}

/// `[sinks.otlp]`: push metrics and verdicts to an OTLP endpoint (off by default).
///
/// `enabled` is ours; the other keys are the exporter's own [`OtlpSinkConfig`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Map<String, Value>")]
pub struct OtlpSinkSection {
    pub enabled: bool,
    #[serde(flatten)]
    pub exporter: OtlpSinkConfig,
}

/// Splits our `enabled` flag off a section and deserializes the rest as the component's
/// own config. Done by hand because `#[serde(flatten)]` silently ignores unknown keys.
fn split_enabled<T: DeserializeOwned>(
    mut map: Map<String, Value>,
    default_enabled: bool,
) -> Result<(bool, T), String> {
    let enabled = match map.remove("enabled") {
        None => default_enabled,
        Some(Value::Bool(b)) => b,
        // Environment overrides arrive as strings when not parsed.
        Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => true,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => false,
        Some(other) => return Err(format!("enabled: expected true or false, got {other}")),
    };
    let rest = serde_path_to_error::deserialize(Value::Object(map)).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            e.into_inner().to_string()
        } else {
            format!("{path}: {}", e.into_inner())
        }
    })?;
    Ok((enabled, rest))
}

impl TryFrom<Map<String, Value>> for OtlpSourceSection {
    type Error = String;
    fn try_from(map: Map<String, Value>) -> Result<Self, String> {
        let (enabled, receiver) = split_enabled(map, true)?;
        Ok(Self { enabled, receiver })
    }
}

impl TryFrom<Map<String, Value>> for OtlpSinkSection {
    type Error = String;
    fn try_from(map: Map<String, Value>) -> Result<Self, String> {
        let (enabled, exporter) = split_enabled(map, false)?;
        Ok(Self { enabled, exporter })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{load_from_str, ConfigFormat};
    use crate::sources::perf::live::CounterMode;

    fn counters(
        text: &str,
        format: ConfigFormat,
        env: &[(&str, &str)],
    ) -> Result<CounterMode, String> {
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        load_from_str(Some(text), format, env)
            .map(|c| c.sources.perf.counters)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn perf_tcp_segments_option() {
        let tcp = |text: &str, format, env: &[(&str, &str)]| {
            let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
            load_from_str(Some(text), format, env)
                .map(|c| c.sources.perf.tcp_segments)
                .map_err(|e| e.to_string())
        };
        let toml = ConfigFormat::Toml;
        assert_eq!(tcp("", toml, &[]), Ok(true));
        assert_eq!(
            tcp("[sources.perf]\nenabled = false\n", toml, &[]),
            Ok(true)
        );
        assert_eq!(
            tcp("[sources.perf]\ntcp_segments = false\n", toml, &[]),
            Ok(false)
        );
        assert_eq!(
            tcp(
                "sources:\n  perf:\n    tcp_segments: false\n",
                ConfigFormat::Yaml,
                &[]
            ),
            Ok(false)
        );
        let env = [("FAULTLINE_SOURCES__PERF__TCP_SEGMENTS", "false")];
        assert_eq!(tcp("", toml, &env), Ok(false));
        let e = tcp("[sources.perf]\ntcp_segments = \"maybe\"\n", toml, &[]).unwrap_err();
        assert!(e.contains("sources.perf.tcp_segments"), "{e}");
    }

    #[test]
    fn perf_counters_option() {
        let toml = ConfigFormat::Toml;
        assert_eq!(counters("", toml, &[]), Ok(CounterMode::Auto));
        for (v, mode) in [
            ("\"auto\"", CounterMode::Auto),
            ("\"on\"", CounterMode::On),
            ("\"off\"", CounterMode::Off),
            ("true", CounterMode::On),
            ("false", CounterMode::Off),
        ] {
            let text = format!("[sources.perf]\ncounters = {v}\n");
            assert_eq!(counters(&text, toml, &[]), Ok(mode), "{v}");
        }
        let e = counters("[sources.perf]\ncounters = \"maybe\"\n", toml, &[]).unwrap_err();
        assert!(e.contains("sources.perf.counters"), "{e}");
        assert!(e.contains("\"auto\", \"on\" or \"off\""), "{e}");
        // YAML 1.1 readers take a bare `off` for false; environment overrides are strings
        // or, parsed, booleans.
        assert_eq!(
            counters(
                "sources:\n  perf:\n    counters: off\n",
                ConfigFormat::Yaml,
                &[]
            ),
            Ok(CounterMode::Off)
        );
        for (v, mode) in [("off", CounterMode::Off), ("true", CounterMode::On)] {
            let env = [("FAULTLINE_SOURCES__PERF__COUNTERS", v)];
            assert_eq!(counters("", toml, &env), Ok(mode), "{v}");
        }
    }
}
