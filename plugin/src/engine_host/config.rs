//! `[engine]` of the config file: which hosting, and the sandbox's limits.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// How the engine runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EngineKind {
    /// In a wasmtime sandbox: a trap restarts the guest instead of crashing the agent.
    #[default]
    Wasm,
    /// Linked into the plugin: fastest, but an engine bug is a plugin bug.
    Native,
}

impl EngineKind {
    /// The lower-case name used in config, logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Wasm => "wasm",
            EngineKind::Native => "native",
        }
    }
}

/// How `call_timeout_ms` stops a runaway guest call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeoutMechanism {
    /// Revoke the guest's memory at the deadline (`engine_host::call_fence`): free while
    /// calls are on time; a call that then never touches memory ends the process.
    #[default]
    Fence,
    /// wasmtime's epoch interruption: stops any call, but its checks in every guest loop
    /// cost 4–17 % of the guest's throughput.
    Epoch,
}

/// A setting of `[engine]` that cannot be used, with its key.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid [engine] setting `{key}`: {reason}")]
pub struct HostConfigError {
    pub key: &'static str,
    pub reason: String,
}

/// Smallest memory limit that still fits the guest's code, stack and a small engine.
pub const MIN_MEMORY_LIMIT_BYTES: u64 = 16 << 20;
/// wasm32 linear memory cannot exceed 4 GiB.
pub const MAX_MEMORY_LIMIT_BYTES: u64 = 4 << 30;

/// The `[engine]` table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HostConfig {
    /// `"wasm"` (default) or `"native"`.
    pub kind: EngineKind,
    /// Cap on the guest's linear memory; growing past it traps (and restarts the guest).
    pub memory_limit_bytes: u64,
    /// Wall-clock budget of one guest call; a runaway call traps. `None` disables it.
    pub call_timeout_ms: Option<u64>,
    /// How the budget is enforced: `"fence"` (default) or `"epoch"`.
    pub timeout_mechanism: TimeoutMechanism,
    /// Deterministic CPU budget of one guest call in wasmtime fuel units (≈ instructions).
    /// Off by default: metering costs throughput; the timeout already stops runaways.
    pub fuel_per_call: Option<u64>,
    /// Back the engine's memory with transparent huge pages as it grows (Linux): the
    /// guest's linear memory (`engine_host::huge_pages`) or, natively, the heap the engine
    /// allocates from (`engine_host::heap_huge_pages`). Fewer TLB misses at thousands of
    /// threads.
    pub huge_pages: bool,
}

impl Default for HostConfig {
    fn default() -> Self {
        Self {
            kind: EngineKind::Wasm,
            // Two targets at the default max_threads (~139 MiB each, see
            // `memory_fit`) and the guest itself: a trap loses every target's state.
            memory_limit_bytes: 512 << 20,
            call_timeout_ms: Some(10_000),
            timeout_mechanism: TimeoutMechanism::Fence,
            fuel_per_call: None,
            huge_pages: true,
        }
    }
}

impl HostConfig {
    /// Checks the limits, naming the first bad key.
    pub fn validate(&self) -> Result<(), HostConfigError> {
        if !(MIN_MEMORY_LIMIT_BYTES..=MAX_MEMORY_LIMIT_BYTES).contains(&self.memory_limit_bytes) {
            return Err(HostConfigError {
                key: "memory_limit_bytes",
                reason: format!(
                    "must be between {MIN_MEMORY_LIMIT_BYTES} (16 MiB) and {MAX_MEMORY_LIMIT_BYTES} (4 GiB), got {}",
                    self.memory_limit_bytes
                ),
            });
        }
        if let Some(ms) = self.call_timeout_ms {
            if !(1..=3_600_000).contains(&ms) {
                return Err(HostConfigError {
                    key: "call_timeout_ms",
                    reason: format!("must be between 1 and 3600000 (one hour), got {ms}"),
                });
            }
        }
        if self.fuel_per_call == Some(0) {
            return Err(HostConfigError {
                key: "fuel_per_call",
                reason: "must be positive (omit it to disable fuel metering)".into(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_a_partial_table_keeps_them() {
        assert_eq!(HostConfig::default().validate(), Ok(()));
        let c: HostConfig = serde_json::from_str(r#"{"kind": "native"}"#).unwrap();
        assert_eq!(c.kind, EngineKind::Native);
        assert_eq!(
            c.memory_limit_bytes,
            HostConfig::default().memory_limit_bytes
        );
    }

    #[test]
    fn unknown_keys_and_bad_limits_are_rejected() {
        assert!(serde_json::from_str::<HostConfig>(r#"{"memory_limit": 1}"#).is_err());
        assert!(serde_json::from_str::<HostConfig>(r#"{"kind": "jvm"}"#).is_err());
        assert!(serde_json::from_str::<HostConfig>(r#"{"timeout_mechanism": "signal"}"#).is_err());
        let c: HostConfig = serde_json::from_str(r#"{"timeout_mechanism": "epoch"}"#).unwrap();
        assert_eq!(c.timeout_mechanism, TimeoutMechanism::Epoch);
        let c = HostConfig {
            memory_limit_bytes: 1024,
            ..HostConfig::default()
        };
        assert_eq!(c.validate().unwrap_err().key, "memory_limit_bytes");
        let c = HostConfig {
            fuel_per_call: Some(0),
            ..HostConfig::default()
        };
        assert_eq!(c.validate().unwrap_err().key, "fuel_per_call");
    }
}
