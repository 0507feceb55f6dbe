//! System-call identities: a compact id, the name tables, and each call's subsystem.
//!
//! Events carry a `u16` id instead of a name so batches stay flat and fast to encode;
//! sources that see numbers (perf's `NR 7`) map them with the per-architecture tables.

use serde::{Deserialize, Serialize};

use crate::report::Subsystem;

/// Compact id of a system-call name. `0` is "unknown".
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct SyscallId(pub u16);

/// CPU architectures whose syscall numbers we can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arch {
    X86_64,
    Aarch64,
}

// TODO(engine-support helper): full tables; this stub keeps the workspace building.
const NAMES: &[&str] = &["unknown", "read", "write", "futex"];

impl SyscallId {
    pub const UNKNOWN: SyscallId = SyscallId(0);

    /// The canonical name ("read", "futex", ...), or "unknown".
    pub fn name(self) -> &'static str {
        NAMES.get(self.0 as usize).copied().unwrap_or("unknown")
    }

    /// Looks a name up; accepts `sys_` prefixed names. Unknown names give [`SyscallId::UNKNOWN`].
    pub fn from_name(name: &str) -> SyscallId {
        let n = name.strip_prefix("sys_").unwrap_or(name);
        NAMES
            .iter()
            .position(|x| *x == n)
            .map(|i| SyscallId(i as u16))
            .unwrap_or(SyscallId::UNKNOWN)
    }

    /// Maps an architecture's syscall number to an id.
    pub fn from_number(_arch: Arch, _nr: u32) -> SyscallId {
        SyscallId::UNKNOWN
    }

    /// The subsystem this call belongs to (for ranking hints and filtering mode).
    pub fn subsystem(self) -> Subsystem {
        Subsystem::Other
    }

    /// Number of ids; every id is below it.
    pub fn count() -> usize {
        NAMES.len()
    }
}
