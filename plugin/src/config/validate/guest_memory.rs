//! The analysis limits against `[engine] memory_limit_bytes`: a warning, not an error.
//!
//! A WASM guest that grows past its limit traps and restarts empty, losing every target's
//! baselines. The bound ([`crate::engine_host::memory_fit`]) takes every target at
//! `max_threads` threads with all their channels in use, which few deployments reach, so
//! going over it only warns, at startup and in `check-config`.
//!
//! Which targets count: each configured `[[targets]]` entry, with its own effective
//! parameters; with automatic discovery (no `[[targets]]`), one target with `[analysis]`'s.
//! Discovered targets are one per process or service name, mostly small, whose threads
//! together are bounded by the host's rather than by `max_targets` × `max_threads`; what
//! they really take is watched by `faultline_guest_memory_bytes` and the
//! `FaultlineGuestMemoryNearLimit` alert.

use std::fmt;

use faultline_engine::Params;

use crate::config::Config;
use crate::engine_host::memory_fit::{self, GUEST_BASE_BYTES};
use crate::engine_host::{EngineKind, MAX_MEMORY_LIMIT_BYTES};

/// Limits whose bound exceeds the guest's memory limit, and what would fit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Overrun {
    /// Targets counted, and whether they are configured (else: discovery, one counted).
    pub targets: usize,
    pub configured: bool,
    /// The largest `max_threads` among them.
    pub max_threads: usize,
    /// The largest bound of one thread among them.
    pub thread_bytes: u64,
    /// The bound of the guest's memory, and its limit.
    pub need_bytes: u64,
    pub limit_bytes: u64,
    /// `max_threads` (whole chunks) that every target could have within the limit.
    pub threads_within: u64,
}

/// Logs a warning when `cfg`'s limits may not fit its guest (see the module docs).
pub(super) fn warn(cfg: &Config) {
    if let Some(o) = overrun(cfg) {
        tracing::warn!(
            targets = o.targets,
            bound_bytes = o.need_bytes,
            memory_limit_bytes = o.limit_bytes,
            "{o}"
        );
    }
}

/// `cfg`'s overrun, if its engine is a WASM guest whose limits may not fit it.
pub(super) fn overrun(cfg: &Config) -> Option<Overrun> {
    if cfg.engine.kind != EngineKind::Wasm {
        return None;
    }
    let configured = !cfg.targets.is_empty();
    let targets: Vec<Params> = if configured {
        // Validated before this runs; a target that fails is left to that error.
        cfg.targets
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.effective_params(&cfg.analysis, i).ok())
            .collect()
    } else {
        vec![cfg.analysis.clone()]
    };
    let need_bytes = memory_fit::guest_bound_bytes(&targets);
    let limit_bytes = cfg.engine.memory_limit_bytes;
    (need_bytes > limit_bytes).then(|| Overrun {
        targets: targets.len(),
        configured,
        max_threads: targets.iter().map(|p| p.max_threads).max().unwrap_or(0),
        thread_bytes: targets
            .iter()
            .map(memory_fit::thread_bound_bytes)
            .max()
            .unwrap_or(0),
        need_bytes,
        limit_bytes,
        threads_within: memory_fit::max_threads_within(limit_bytes, &targets),
    })
}

const MIB: f64 = (1u64 << 20) as f64;

impl fmt::Display for Overrun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |b: u64| b as f64 / MIB;
        let which = if self.configured {
            format!("{} configured target(s)", self.targets)
        } else {
            "one discovered target (automatic discovery counts one)".to_owned()
        };
        write!(
            f,
            "the analysis limits may not fit [engine] memory_limit_bytes = {:.0} MiB: \
             {which} at up to {} threads (analysis.max_threads), {:.1} KiB a thread with \
             all of its max_syscalls_per_thread channels in use, plus each target's \
             overflow sketch and {:.0} MiB for the guest itself, come to {:.1} MiB. A guest \
             that grows past its limit traps and restarts empty, losing every target's \
             baselines. ",
            mib(self.limit_bytes),
            self.max_threads,
            self.thread_bytes as f64 / 1024.0,
            mib(GUEST_BASE_BYTES),
            mib(self.need_bytes),
        )?;
        // Rounded up to whole MiB, so the advice itself passes this check.
        let raise = self.need_bytes.div_ceil(1 << 20) << 20;
        if raise <= MAX_MEMORY_LIMIT_BYTES {
            write!(
                f,
                "Raise [engine] memory_limit_bytes to at least {raise} ({:.0} MiB), or ",
                mib(raise)
            )?;
        } else {
            write!(
                f,
                "That is more than the 4 GiB a WASM guest can have: set [engine] kind = \
                 \"native\", or "
            )?;
        }
        if self.threads_within > 0 {
            write!(
                f,
                "lower analysis.max_threads (per target: targets[].analysis.max_threads) \
                 to {} or less. ",
                self.threads_within
            )?;
        } else {
            write!(f, "lower analysis.sketch_width or the number of targets. ")?;
        }
        write!(
            f,
            "Most threads use fewer channels: faultline_guest_memory_bytes shows what the \
             guest really takes."
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TargetConfig;
    use crate::engine_host::HostConfig;

    fn target(name: &str) -> TargetConfig {
        TargetConfig {
            name: name.into(),
            process_names: vec![name.into()],
            ..TargetConfig::default()
        }
    }

    fn with_targets(n: usize) -> Config {
        Config {
            targets: (0..n).map(|i| target(&format!("t{i}"))).collect(),
            ..Config::default()
        }
    }

    #[test]
    fn the_defaults_with_one_target_or_discovery_fit() {
        assert_eq!(overrun(&Config::default()), None, "automatic discovery");
        assert_eq!(overrun(&with_targets(1)), None, "one configured target");
    }

    #[test]
    fn targets_that_may_outgrow_the_limit_are_named_with_the_way_out() {
        let cfg = with_targets(4);
        let o = overrun(&cfg).expect("4 default targets exceed 512 MiB");
        assert_eq!((o.targets, o.configured, o.max_threads), (4, true, 16_384));
        assert!(o.need_bytes > 4 * (128 << 20), "{o:?}");
        let text = o.to_string();
        assert!(text.contains("4 configured target(s)"), "{text}");
        assert!(
            text.contains("Raise [engine] memory_limit_bytes to at least"),
            "{text}"
        );
        // The advice fits: each way out passes the check.
        let raise = o.need_bytes.div_ceil(1 << 20) << 20;
        let raised = Config {
            engine: HostConfig {
                memory_limit_bytes: raise,
                ..HostConfig::default()
            },
            ..cfg.clone()
        };
        assert_eq!(overrun(&raised), None);
        let mut fewer = cfg.clone();
        fewer.analysis.max_threads = o.threads_within as usize;
        assert_eq!(overrun(&fewer), None, "{text}");
        assert!(text.contains(&format!("to {} or less", o.threads_within)));
    }

    #[test]
    fn a_target_s_own_limits_count_and_native_is_never_warned() {
        let mut cfg = with_targets(1);
        cfg.targets[0]
            .analysis
            .insert("max_threads".into(), serde_json::json!(65_536));
        let o = overrun(&cfg).expect("65,536 threads exceed 512 MiB");
        assert_eq!(o.max_threads, 65_536);
        cfg.engine.kind = EngineKind::Native;
        assert_eq!(overrun(&cfg), None);
    }

    #[test]
    fn discovery_counts_one_target_with_the_analysis_limits() {
        let mut cfg = Config::default();
        cfg.analysis.max_threads = 1 << 20;
        let o = overrun(&cfg).expect("a million threads exceed 512 MiB");
        assert_eq!((o.targets, o.configured), (1, false));
        let text = o.to_string();
        assert!(text.contains("one discovered target"), "{text}");
        assert!(text.contains("more than the 4 GiB"), "{text}");
    }
}
