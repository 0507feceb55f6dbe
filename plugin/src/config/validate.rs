//! Checks across keys that serde cannot express: parameter ranges (per target, after
//! overrides), listen addresses that can all be bound at once, the OTLP push endpoint,
//! unique target names, and sources that need a setting. One check only warns: analysis
//! limits that may not fit the WASM guest's memory ([`guest_memory`]).

mod guest_memory;
mod listeners;
mod otlp_endpoint;

use std::collections::HashSet;

use super::{Config, ConfigError};

/// Bounds of `sources.otlp.max_request_bytes`: below 1 KiB no real OTLP request fits, above
/// 256 MiB (times 16 requests in flight per listener) the bound no longer bounds memory.
pub const MIN_REQUEST_BYTES: usize = 1024;
pub const MAX_REQUEST_BYTES: usize = 256 * 1024 * 1024;
/// Per-target series bounds shared by the Prometheus and OTLP sinks.
const MAX_SINK_TARGETS: usize = 4096;
const MAX_SINK_SYSCALLS: usize = 100;

/// Validates `cfg`, returning the first problem with its key path; logs what only
/// deserves a warning.
pub fn validate(cfg: &Config) -> Result<(), ConfigError> {
    cfg.engine
        .validate()
        .map_err(|e| ConfigError::invalid(format!("engine.{}", e.key), e.reason))?;
    cfg.analysis
        .validate()
        .map_err(|e| ConfigError::invalid(format!("analysis.{}", e.key), e.reason))?;
    targets(cfg)?;
    pipeline(cfg)?;
    sources(cfg)?;
    sinks(cfg)?;
    listeners::check(cfg)?;
    // Last: it reads every target's effective parameters, checked above.
    guest_memory::warn(cfg);
    Ok(())
}

fn targets(cfg: &Config) -> Result<(), ConfigError> {
    let mut names = HashSet::new();
    for (i, t) in cfg.targets.iter().enumerate() {
        let name = t.name.trim();
        if name.is_empty() {
            return Err(ConfigError::invalid(
                format!("targets[{i}].name"),
                "must be a non-empty name",
            ));
        }
        // The name is looked up as written (per-target parameters, `/trigger?target=`):
        // a stray space would make it a different name from the one in metrics.
        if name != t.name {
            return Err(ConfigError::invalid(
                format!("targets[{i}].name"),
                format!(
                    "must not start or end with whitespace, got {:?} (did you mean {name:?}?)",
                    t.name
                ),
            ));
        }
        if name.len() > 128 || name.chars().any(char::is_control) {
            return Err(ConfigError::invalid(
                format!("targets[{i}].name"),
                "must be at most 128 printable characters",
            ));
        }
        if !names.insert(name) {
            return Err(ConfigError::invalid(
                format!("targets[{i}].name"),
                format!("duplicate target name `{name}`"),
            ));
        }
        if t.matches_nothing() {
            return Err(ConfigError::invalid(
                format!("targets[{i}]"),
                "needs at least one of process_names, pids, cgroups, service_names",
            ));
        }
        for (list, values) in [
            ("process_names", &t.process_names),
            ("cgroups", &t.cgroups),
            ("service_names", &t.service_names),
            ("hosts", &t.hosts),
        ] {
            if let Some(j) = values.iter().position(|v| v.trim().is_empty()) {
                return Err(ConfigError::invalid(
                    format!("targets[{i}].{list}[{j}]"),
                    "must be a non-empty name (an empty entry matches no process)",
                ));
            }
        }
        t.effective_params(&cfg.analysis, i)?;
    }
    if cfg.targets.len() > cfg.analysis.max_targets {
        return Err(ConfigError::invalid(
            "targets",
            format!(
                "{} targets configured but analysis.max_targets is {}",
                cfg.targets.len(),
                cfg.analysis.max_targets
            ),
        ));
    }
    Ok(())
}

fn pipeline(cfg: &Config) -> Result<(), ConfigError> {
    let p = &cfg.pipeline;
    if p.queue_capacity == 0 || p.queue_capacity > 65_536 {
        return Err(ConfigError::invalid(
            "pipeline.queue_capacity",
            format!(
                "must be between 1 and 65536 batches, got {}",
                p.queue_capacity
            ),
        ));
    }
    seconds("pipeline.idle_seconds", p.idle_seconds)?;
    seconds(
        "pipeline.shutdown_timeout_seconds",
        p.shutdown_timeout_seconds,
    )?;
    // The HTTP handler gives the engine 30 s to answer a trigger; leave room for the
    // evaluation itself after the wait.
    let max_wait = crate::sinks::http::TRIGGER_TIMEOUT.as_secs_f64() - 10.0;
    if !(p.trigger_wait_seconds.is_finite() && (0.0..=max_wait).contains(&p.trigger_wait_seconds)) {
        return Err(ConfigError::invalid(
            "pipeline.trigger_wait_seconds",
            format!(
                "must be between 0 and {max_wait} seconds (POST /trigger answers within {} s), got {}",
                crate::sinks::http::TRIGGER_TIMEOUT.as_secs(),
                p.trigger_wait_seconds
            ),
        ));
    }
    let lag = p.reorder_seconds;
    if !(lag.is_finite() && (0.0..=MAX_REORDER_SECONDS).contains(&lag)) {
        return Err(ConfigError::invalid(
            "pipeline.reorder_seconds",
            format!("must be between 0 (off) and {MAX_REORDER_SECONDS} seconds, got {lag}"),
        ));
    }
    // Records still in flight when a silent target's clock moves on arrive behind it:
    // the silence must be well past a live source's delivery delay (about 2 s).
    let silent = p.silent_after_seconds;
    if !(silent == 0.0 || (silent.is_finite() && (MIN_SILENT_AFTER..=86_400.0).contains(&silent))) {
        return Err(ConfigError::invalid(
            "pipeline.silent_after_seconds",
            format!(
                "must be 0 (off) or between {MIN_SILENT_AFTER} and 86400 seconds (live sources deliver about 2 s late), got {silent}"
            ),
        ));
    }
    if let Some(name) = &p.host_name {
        if name.trim().is_empty() || name.len() > 253 || name.chars().any(char::is_control) {
            return Err(ConfigError::invalid(
                "pipeline.host_name",
                "must be a host name of at most 253 printable characters; leave it out for the kernel's (`hostname`)",
            ));
        }
    }
    Ok(())
}

/// The longest `pipeline.reorder_seconds`: a lagging process holds its target's reports
/// back that long (what waits is bounded by `pipeline::reorder::MAX_HELD_EVENTS`).
const MAX_REORDER_SECONDS: f64 = 300.0;

/// The shortest `pipeline.silent_after_seconds`: a few times a live source's delay.
const MIN_SILENT_AFTER: f64 = 5.0;

fn sources(cfg: &Config) -> Result<(), ConfigError> {
    let s = &cfg.sources;
    let perf_targets = usize::from(!s.perf.pids.is_empty())
        + usize::from(s.perf.cgroup.is_some())
        + usize::from(!s.perf.command.is_empty());
    let max = s.otlp.receiver.max_request_bytes;
    if !(MIN_REQUEST_BYTES..=MAX_REQUEST_BYTES).contains(&max) {
        return Err(ConfigError::invalid(
            "sources.otlp.max_request_bytes",
            format!(
                "must be between {MIN_REQUEST_BYTES} (1 KiB) and {MAX_REQUEST_BYTES} (256 MiB) bytes, got {max}"
            ),
        ));
    }
    let seg = &s.otlp.receiver.tcp_segments;
    if seg.enabled {
        for (key, name) in [
            ("sources.otlp.tcp_segments.sent", &seg.sent),
            (
                "sources.otlp.tcp_segments.retransmitted",
                &seg.retransmitted,
            ),
        ] {
            if name.trim().is_empty() {
                return Err(ConfigError::invalid(
                    key,
                    "must name a metric (or set enabled = false)",
                ));
            }
            if name.trim() != name.as_str() {
                return Err(ConfigError::invalid(
                    key,
                    format!("{name:?} starts or ends with whitespace, which no metric name has"),
                ));
            }
        }
        if seg.sent.eq_ignore_ascii_case(&seg.retransmitted) {
            return Err(ConfigError::invalid(
                "sources.otlp.tcp_segments",
                format!(
                    "sent and retransmitted both name {:?}: they must differ",
                    seg.sent
                ),
            ));
        }
    }
    // perf's `-G ""` is refused only once `run` starts perf; and an empty value is what an
    // operator tries when an environment override cannot unset the key.
    if s.perf.enabled
        && s.perf
            .cgroup
            .as_deref()
            .is_some_and(|c| c.trim().is_empty())
    {
        return Err(ConfigError::invalid(
            "sources.perf.cgroup",
            "must name a cgroup, e.g. `system.slice/mariadb.service`, got an empty string \
             (to trace pids or a command instead, remove the key from the file)",
        ));
    }
    if s.perf.enabled && perf_targets != 1 {
        return Err(ConfigError::invalid(
            "sources.perf",
            "enabled: set exactly one of pids, cgroup, command",
        ));
    }
    if s.lttng.enabled && s.lttng.relayd_url.is_none() && s.lttng.trace_dir.is_none() {
        return Err(ConfigError::invalid(
            "sources.lttng",
            "enabled but neither relayd_url nor trace_dir is set",
        ));
    }
    if let Some(url) = s.lttng.relayd_url.as_deref().filter(|_| s.lttng.enabled) {
        crate::sources::lttng::live_url::parse(url)
            .map_err(|e| ConfigError::invalid("sources.lttng.relayd_url", e))?;
    }
    if crate::sources::perf::parse_arch(&s.replay.arch).is_none() {
        return Err(ConfigError::invalid(
            "sources.replay.arch",
            format!("unknown architecture `{}` (x86_64, aarch64)", s.replay.arch),
        ));
    }
    if s.replay.enabled && s.replay.path.is_none() {
        return Err(ConfigError::invalid(
            "sources.replay.path",
            "required when sources.replay is enabled",
        ));
    }
    Ok(())
}

fn sinks(cfg: &Config) -> Result<(), ConfigError> {
    let p = &cfg.sinks.prometheus;
    series_caps("sinks.prometheus", p.max_targets, p.max_syscalls)?;
    let o = &cfg.sinks.otlp.exporter;
    if cfg.sinks.otlp.enabled {
        otlp_endpoint::check(o)?;
    }
    series_caps("sinks.otlp", o.max_targets, o.max_syscalls)?;
    for (key, v) in [
        ("sinks.otlp.interval_seconds", o.interval_seconds),
        ("sinks.otlp.timeout_seconds", o.timeout_seconds),
    ] {
        if v == 0 || v > 86_400 {
            return Err(ConfigError::invalid(
                key,
                format!("must be a positive whole number of seconds (at most 86400), got {v}"),
            ));
        }
    }
    Ok(())
}

/// `max_targets` and `max_syscalls` of a metrics sink.
fn series_caps(section: &str, max_targets: usize, max_syscalls: usize) -> Result<(), ConfigError> {
    if max_targets == 0 || max_targets > MAX_SINK_TARGETS {
        return Err(ConfigError::invalid(
            format!("{section}.max_targets"),
            format!("must be between 1 and {MAX_SINK_TARGETS}, got {max_targets}"),
        ));
    }
    if max_syscalls == 0 || max_syscalls > MAX_SINK_SYSCALLS {
        return Err(ConfigError::invalid(
            format!("{section}.max_syscalls"),
            format!("must be between 1 and {MAX_SINK_SYSCALLS}, got {max_syscalls}"),
        ));
    }
    Ok(())
}

fn seconds(key: &str, v: f64) -> Result<(), ConfigError> {
    if !(v.is_finite() && v > 0.0 && v <= 86_400.0) {
        return Err(ConfigError::invalid(
            key,
            format!("must be a positive number of seconds (at most 86400), got {v}"),
        ));
    }
    Ok(())
}
