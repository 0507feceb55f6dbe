//! System-call identities: a compact id, the name tables, and each call's subsystem.
//!
//! Events carry a `u16` id instead of a name so batches stay flat and fast to encode;
//! sources that see numbers (perf's `NR 7`) map them with the per-architecture tables.
//!
//! Ids index one canonical name list (`names.rs`): `unknown` at `0`, then in byte order the
//! union of the x86_64 and aarch64 names (from the kernel headers, plus the calls of newer
//! kernels that share one numbering since 424, plus the 32-bit multiplexers `ipc` and
//! `socketcall`). The tables are generated source (`wasm-guest/tools/gen_syscall_tables.py`),
//! so ids are identical in native and wasm32 builds of the same version; they are *not* a
//! cross-version wire format — persist names.

mod aarch64;
mod aliases;
mod lookup;
mod names;
mod subsystem;
pub mod timeout;
mod x86_64;

use serde::{Deserialize, Serialize};

use crate::report::Subsystem;

use names::NAMES;

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

/// Kernel-symbol prefixes tracers put before a call's name (`sys_read`, `__x64_sys_read`,
/// kprobe and LTTng symbol names); stripped before lookup so every source shares one table.
const PREFIXES: [&str; 7] = [
    "__x64_sys_",
    "__arm64_sys_",
    "__ia32_sys_",
    "__se_sys_",
    "__do_sys_",
    "compat_sys_",
    "sys_",
];

/// Ids looked up once (evaluations ask for them per thread).
static THREAD_ENDS: std::sync::OnceLock<[SyscallId; 2]> = std::sync::OnceLock::new();
static CLOSES: std::sync::OnceLock<[SyscallId; 2]> = std::sync::OnceLock::new();

/// `-EAGAIN` (x86_64 and aarch64 alike): what a receive on a non-blocking descriptor
/// returns when nothing has arrived, before its thread waits for input.
pub const WOULD_BLOCK: i64 = -11;

impl SyscallId {
    pub const UNKNOWN: SyscallId = SyscallId(0);

    /// The canonical name ("read", "futex", ...), or "unknown".
    pub fn name(self) -> &'static str {
        NAMES.get(usize::from(self.0)).copied().unwrap_or("unknown")
    }

    /// Looks a name up without allocating (it runs per event for name-carrying sources):
    /// one hash and usually one comparison in a table built at compile time.
    ///
    /// Accepts canonical names, kernel-symbol prefixes (`sys_read`, `__x64_sys_read`,
    /// `compat_sys_read`) and the aliases tracers and 32-bit hosts use (`newfstat` →
    /// `fstat`, `mmap_pgoff`/`mmap2` → `mmap`, `llseek` → `lseek`, `stat64` → `stat`, ...).
    /// Unknown names give [`SyscallId::UNKNOWN`]; counting them is the caller's job.
    pub fn from_name(name: &str) -> SyscallId {
        SyscallId(lookup::lookup(strip_prefix(name)).unwrap_or(0))
    }

    /// Maps an architecture's syscall number to an id; unassigned numbers give
    /// [`SyscallId::UNKNOWN`].
    pub fn from_number(arch: Arch, nr: u32) -> SyscallId {
        let table: &[u16] = match arch {
            Arch::X86_64 => &x86_64::X86_64,
            Arch::Aarch64 => &aarch64::AARCH64,
        };
        let id = usize::try_from(nr)
            .ok()
            .and_then(|i| table.get(i).copied())
            .unwrap_or(0);
        SyscallId(id)
    }

    /// The subsystem this call belongs to (for ranking hints and filtering mode).
    ///
    /// A table lookup; the classification and its judgment calls (`read`/`write` count as
    /// disk I/O, `fcntl` as disk I/O, clocks and timers as CPU scheduling) are documented
    /// in `subsystem.rs`. Unknown ids are [`Subsystem::Other`].
    pub fn subsystem(self) -> Subsystem {
        subsystem::SUBSYSTEMS
            .get(usize::from(self.0))
            .copied()
            .unwrap_or(Subsystem::Other)
    }

    /// Whether this call takes any file descriptor, a file's or a socket's (`read`,
    /// `write`, `readv`, `writev`, `close`): its subsystem is disk I/O by name, but it may
    /// as well be network I/O.
    pub fn fd_generic(self) -> bool {
        subsystem::fd_generic(self.0)
    }

    /// Whether a thread entering this call never returns from it (`exit`, `exit_group`):
    /// its open call is its end, not a hang.
    pub fn ends_thread(self) -> bool {
        let [exit, group] = *THREAD_ENDS.get_or_init(|| {
            [
                SyscallId::from_name("exit"),
                SyscallId::from_name("exit_group"),
            ]
        });
        self == exit || self == group
    }

    /// `exit_group`: its caller's whole process ends.
    pub fn ends_process(self) -> bool {
        THREAD_ENDS
            .get_or_init(|| {
                [
                    SyscallId::from_name("exit"),
                    SyscallId::from_name("exit_group"),
                ]
            })
            .get(1)
            == Some(&self)
    }

    /// Whether this call closes a file or socket (`close`, `shutdown`).
    pub fn closes(self) -> bool {
        let [close, shutdown] = *CLOSES.get_or_init(|| {
            [
                SyscallId::from_name("close"),
                SyscallId::from_name("shutdown"),
            ]
        });
        self == close || self == shutdown
    }

    /// Whether this call takes input from a file or socket (`read`, `readv`, `recvfrom`,
    /// `recvmsg`, `recvmmsg`): one that returned [`WOULD_BLOCK`] found nothing to read.
    pub fn receives(self) -> bool {
        subsystem::receives(self.0)
    }

    /// Whether this call hands output to a file or socket (`write`, `writev`, `sendto`,
    /// `sendmsg`, `sendmmsg`, `sendfile`): a wait right after one may wait for a full
    /// socket to drain, which is the network's doing, not a peer's.
    pub fn sends(self) -> bool {
        subsystem::sends(self.0)
    }

    /// Number of ids; every id is below it.
    pub const fn count() -> usize {
        NAMES.len()
    }
}

/// The name without a kernel-symbol prefix; `sys_` first, as by far the most common.
#[inline]
fn strip_prefix(name: &str) -> &str {
    if let Some(bare) = name.strip_prefix("sys_") {
        return bare;
    }
    if matches!(name.as_bytes().first(), Some(b'_' | b'c')) {
        if let Some(bare) = PREFIXES.iter().find_map(|p| name.strip_prefix(p)) {
            return bare;
        }
    }
    name
}

/// Compile-time lookup of a canonical name, for the const tables of aliases and subsystems;
/// a name missing from the table fails the build, so typos cannot slip in.
const fn const_id(name: &str) -> u16 {
    let mut lo = 1;
    let mut hi = NAMES.len();
    while lo < hi {
        let mid = (lo + hi) / 2;
        match const_cmp(NAMES[mid].as_bytes(), name.as_bytes()) {
            core::cmp::Ordering::Less => lo = mid + 1,
            core::cmp::Ordering::Greater => hi = mid,
            core::cmp::Ordering::Equal => return mid as u16,
        }
    }
    panic!("syscall name missing from the canonical table")
}

/// Byte-wise ordering of two strings in a const context (where `Ord` is not callable).
const fn const_cmp(a: &[u8], b: &[u8]) -> core::cmp::Ordering {
    let mut i = 0;
    while i < a.len() && i < b.len() {
        if a[i] < b[i] {
            return core::cmp::Ordering::Less;
        }
        if a[i] > b[i] {
            return core::cmp::Ordering::Greater;
        }
        i += 1;
    }
    if a.len() < b.len() {
        core::cmp::Ordering::Less
    } else if a.len() > b.len() {
        core::cmp::Ordering::Greater
    } else {
        core::cmp::Ordering::Equal
    }
}

/// Whether `name` starts with `prefix`, in a const context.
const fn const_starts_with(name: &str, prefix: &str) -> bool {
    let (n, p) = (name.as_bytes(), prefix.as_bytes());
    if p.len() > n.len() {
        return false;
    }
    let mut i = 0;
    while i < p.len() {
        if n[i] != p[i] {
            return false;
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_names_are_strictly_sorted_for_binary_search() {
        let sorted = &NAMES[1..];
        assert!(sorted.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn every_alias_resolves_to_its_canonical_name() {
        for (alias, canonical) in aliases::all() {
            assert_eq!(SyscallId::from_name(alias).name(), *canonical, "{alias}");
            assert!(
                NAMES.binary_search(alias).is_err(),
                "{alias} shadows a name"
            );
        }
    }

    #[test]
    fn hash_lookups_stay_short_and_agree_with_binary_search() {
        assert!(lookup::max_probes() <= 6, "{}", lookup::max_probes());
        for len in 0..40 {
            let s: Vec<u8> = (0..len).map(|i| b'a' + (i * 7 % 26) as u8).collect();
            assert!(lookup::hashes_agree(&s), "length {len}");
        }
        for (i, name) in NAMES.iter().enumerate().skip(1) {
            assert_eq!(NAMES[1..].binary_search(name), Ok(i - 1));
            assert_eq!(lookup::lookup(name), Some(i as u16));
        }
    }

    #[test]
    fn receives_are_the_calls_that_read_a_descriptor() {
        for name in ["read", "readv", "recvfrom", "recvmsg", "recvmmsg"] {
            assert!(SyscallId::from_name(name).receives(), "{name}");
        }
        // Waits and writes find nothing to read: their EAGAIN says something else.
        for name in [
            "futex",
            "epoll_wait",
            "poll",
            "write",
            "sendto",
            "pread64",
            "zzz",
        ] {
            assert!(!SyscallId::from_name(name).receives(), "{name}");
        }
    }

    #[test]
    fn sends_are_the_calls_that_write_a_descriptor() {
        for name in [
            "write", "writev", "sendto", "sendmsg", "sendmmsg", "sendfile",
        ] {
            assert!(SyscallId::from_name(name).sends(), "{name}");
        }
        for name in ["read", "recvfrom", "epoll_wait", "pwrite64", "fsync", "zzz"] {
            assert!(!SyscallId::from_name(name).sends(), "{name}");
        }
    }

    #[test]
    fn no_name_is_listed_in_two_subsystems() {
        let mut seen = std::collections::HashMap::new();
        for (names, subsystem) in subsystem::explicit_lists() {
            for name in names {
                if let Some(previous) = seen.insert(*name, subsystem) {
                    panic!("{name} listed as {previous:?} and {subsystem:?}");
                }
                assert_eq!(SyscallId::from_name(name).subsystem(), subsystem);
            }
        }
    }
}
