//! Checks across keys that serde cannot express: parameter ranges (per target, after
//! overrides), socket addresses, unique target names, and sources that need a setting.

use std::collections::HashSet;
use std::net::SocketAddr;

use super::{Config, ConfigError};

/// Validates `cfg`, returning the first problem with its key path.
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
    Ok(())
}

fn sources(cfg: &Config) -> Result<(), ConfigError> {
    let s = &cfg.sources;
    for (key, v) in [
        ("sources.otlp.grpc", &s.otlp.receiver.grpc),
        ("sources.otlp.http", &s.otlp.receiver.http),
    ] {
        if let Some(v) = v {
            address(key, v)?;
        }
    }
    let perf_targets = usize::from(!s.perf.pids.is_empty())
        + usize::from(s.perf.cgroup.is_some())
        + usize::from(!s.perf.command.is_empty());
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
    address("sinks.prometheus.listen", &p.listen)?;
    if p.max_targets == 0 || p.max_targets > 4096 {
        return Err(ConfigError::invalid(
            "sinks.prometheus.max_targets",
            format!("must be between 1 and 4096, got {}", p.max_targets),
        ));
    }
    if p.max_syscalls == 0 || p.max_syscalls > 100 {
        return Err(ConfigError::invalid(
            "sinks.prometheus.max_syscalls",
            format!("must be between 1 and 100, got {}", p.max_syscalls),
        ));
    }
    let o = &cfg.sinks.otlp.exporter;
    if o.max_targets == 0 || o.max_syscalls == 0 {
        return Err(ConfigError::invalid(
            "sinks.otlp",
            "max_targets and max_syscalls must be positive",
        ));
    }
    if o.interval_seconds == 0 {
        return Err(ConfigError::invalid(
            "sinks.otlp.interval_seconds",
            "must be a positive number of seconds",
        ));
    }
    Ok(())
}

/// A listen address must be a literal `ip:port` so we never resolve names at startup.
fn address(key: &str, v: &str) -> Result<SocketAddr, ConfigError> {
    v.parse::<SocketAddr>().map_err(|e| {
        ConfigError::invalid(
            key,
            format!("must be an `ip:port` address, got `{v}` ({e})"),
        )
    })
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
