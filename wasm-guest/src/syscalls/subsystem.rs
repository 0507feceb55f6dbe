//! Which kernel subsystem each call exercises, so a ranking of affected calls can point
//! the on-call engineer at CPU, memory, disk, network, locks or process management.
//!
//! Judgment calls (the classification is per call *name*, not per file descriptor):
//! - `read`/`write` and their vector/positional forms are **disk I/O**, as the PerfCompass
//!   paper treats `sys_read`/`sys_write`; on sockets they are network I/O, which a name
//!   cannot tell. Both are I/O, so filtering mode (which keeps disk *and* network) is right
//!   either way. A report's subsystem does better: these calls vote with the affected
//!   threads' unambiguous I/O calls (`poll`, `recvfrom` against `pread64`, `fdatasync`),
//!   see [`SyscallId::fd_generic`](super::SyscallId::fd_generic).
//! - `fcntl` is **disk I/O**: its record locks are served by the filesystem, and the paper
//!   (Table 4, fault 3) reads a rise in `fcntl64` as disk contention. `flock` is locking.
//! - Clocks, timers and sleeps are **CPU scheduling**: their latency tracks how soon the
//!   thread gets a CPU back, and `sched_*`/`nanosleep` stretch under a CPU cap.
//! - `ipc` (the 32-bit SysV multiplexer, usually semaphores such as Apache's accept mutex)
//!   and `membarrier`/robust-futex lists are **locking**; SysV shared memory is memory.
//! - `select`/`poll`/`epoll_*` are **network I/O**: servers wait on sockets with them.
//! - Everything unlisted (ioctl, pipes, eventfds, credentials, mounts, ...) is `other`.
//!
//! The table is built at compile time; a name missing from the canonical list fails the
//! build, so the lists below cannot drift from the generated tables unnoticed.

use super::names::NAMES;
use super::{const_id, const_starts_with};
use crate::report::Subsystem;

/// Name prefixes that decide a whole family; the explicit lists below override them.
const PREFIX_RULES: [(&str, Subsystem); 9] = [
    ("sched_", Subsystem::CpuScheduling),
    ("timer_", Subsystem::CpuScheduling),
    ("timerfd_", Subsystem::CpuScheduling),
    ("clock_", Subsystem::CpuScheduling),
    ("io_", Subsystem::DiskIo),
    ("epoll_", Subsystem::NetworkIo),
    ("rt_sig", Subsystem::ProcessManagement),
    ("pidfd_", Subsystem::ProcessManagement),
    ("landlock_", Subsystem::ProcessManagement),
];

const CPU_SCHEDULING: &[&str] = &[
    "nanosleep",
    "getcpu",
    "pause",
    "alarm",
    "setitimer",
    "getitimer",
    "getpriority",
    "setpriority",
    "gettimeofday",
    "settimeofday",
    "adjtimex",
    "time",
    "rseq",
];

const MEMORY: &[&str] = &[
    "mmap",
    "munmap",
    "mprotect",
    "madvise",
    "brk",
    "mremap",
    "mlock",
    "mlock2",
    "munlock",
    "mlockall",
    "munlockall",
    "msync",
    "mincore",
    "remap_file_pages",
    "mbind",
    "set_mempolicy",
    "get_mempolicy",
    "set_mempolicy_home_node",
    "migrate_pages",
    "move_pages",
    "process_madvise",
    "process_mrelease",
    "process_vm_readv",
    "process_vm_writev",
    "memfd_create",
    "memfd_secret",
    "pkey_mprotect",
    "pkey_alloc",
    "pkey_free",
    "cachestat",
    "map_shadow_stack",
    "mseal",
    "userfaultfd",
    "swapon",
    "swapoff",
    "shmget",
    "shmat",
    "shmdt",
    "shmctl",
];

const DISK_IO: &[&str] = &[
    "read",
    "write",
    "pread64",
    "pwrite64",
    "readv",
    "writev",
    "preadv",
    "pwritev",
    "preadv2",
    "pwritev2",
    "fsync",
    "fdatasync",
    "sync",
    "syncfs",
    "sync_file_range",
    "open",
    "openat",
    "openat2",
    "creat",
    "close",
    "close_range",
    "lseek",
    "fstat",
    "stat",
    "lstat",
    "newfstatat",
    "statx",
    "statfs",
    "fstatfs",
    "ustat",
    "fallocate",
    "ftruncate",
    "truncate",
    "rename",
    "renameat",
    "renameat2",
    "unlink",
    "unlinkat",
    "link",
    "linkat",
    "symlink",
    "symlinkat",
    "readlink",
    "readlinkat",
    "mkdir",
    "mkdirat",
    "rmdir",
    "mknod",
    "mknodat",
    "getdents",
    "getdents64",
    "access",
    "faccessat",
    "faccessat2",
    "chmod",
    "fchmod",
    "fchmodat",
    "chown",
    "fchown",
    "lchown",
    "fchownat",
    "utime",
    "utimes",
    "utimensat",
    "futimesat",
    "getcwd",
    "chdir",
    "fchdir",
    "fadvise64",
    "readahead",
    "sendfile",
    "splice",
    "tee",
    "vmsplice",
    "copy_file_range",
    "fcntl",
    "ioprio_get",
    "ioprio_set",
    "name_to_handle_at",
    "open_by_handle_at",
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "getxattr",
    "lgetxattr",
    "fgetxattr",
    "listxattr",
    "llistxattr",
    "flistxattr",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
    "setxattrat",
    "getxattrat",
    "listxattrat",
    "removexattrat",
    "fchmodat2",
    "file_getattr",
    "file_setattr",
];

const NETWORK_IO: &[&str] = &[
    "socket",
    "socketpair",
    "socketcall",
    "connect",
    "accept",
    "accept4",
    "bind",
    "listen",
    "getsockname",
    "getpeername",
    "sendto",
    "recvfrom",
    "sendmsg",
    "recvmsg",
    "sendmmsg",
    "recvmmsg",
    "shutdown",
    "getsockopt",
    "setsockopt",
    "poll",
    "ppoll",
    "select",
    "pselect6",
];

const LOCKING: &[&str] = &[
    "futex",
    "futex_waitv",
    "futex_wake",
    "futex_wait",
    "futex_requeue",
    "flock",
    "semop",
    "semtimedop",
    "semget",
    "semctl",
    "ipc",
    "set_robust_list",
    "get_robust_list",
    "membarrier",
];

const PROCESS_MANAGEMENT: &[&str] = &[
    "clone",
    "clone3",
    "fork",
    "vfork",
    "execve",
    "execveat",
    "exit",
    "exit_group",
    "wait4",
    "waitid",
    "kill",
    "tkill",
    "tgkill",
    "prctl",
    "arch_prctl",
    "sigaltstack",
    "signalfd",
    "signalfd4",
    "set_tid_address",
    "getpid",
    "getppid",
    "gettid",
    "getpgid",
    "setpgid",
    "getpgrp",
    "getsid",
    "setsid",
    "ptrace",
    "unshare",
    "setns",
    "prlimit64",
    "getrlimit",
    "setrlimit",
    "getrusage",
    "times",
    "capget",
    "capset",
    "personality",
    "seccomp",
    "kcmp",
];

/// Calls that take any file descriptor, a file's or a socket's alike: classed as disk I/O
/// by name (see the module doc), though on a web server they mostly read and write
/// sockets. A report's subsystem lets the affected threads' unambiguous I/O calls decide
/// (`crate::ranking::dominant_subsystem`).
const FD_GENERIC: [u16; 5] = [
    const_id("read"),
    const_id("write"),
    const_id("readv"),
    const_id("writev"),
    const_id("close"),
];

/// Whether `id` is one of [`FD_GENERIC`].
pub(super) fn fd_generic(id: u16) -> bool {
    FD_GENERIC.contains(&id)
}

/// Calls that take input from a descriptor (see [`SyscallId::receives`](super::SyscallId::receives)).
const RECEIVES: [u16; 5] = [
    const_id("read"),
    const_id("readv"),
    const_id("recvfrom"),
    const_id("recvmsg"),
    const_id("recvmmsg"),
];

/// Whether `id` is one of [`RECEIVES`]: compile-time ids, as the per-call path asks.
pub(super) fn receives(id: u16) -> bool {
    RECEIVES.contains(&id)
}

/// Calls that hand output to a descriptor (see [`SyscallId::sends`](super::SyscallId::sends)).
const SENDS: [u16; 6] = [
    const_id("write"),
    const_id("writev"),
    const_id("sendto"),
    const_id("sendmsg"),
    const_id("sendmmsg"),
    const_id("sendfile"),
];

/// Whether `id` is one of [`SENDS`].
pub(super) fn sends(id: u16) -> bool {
    SENDS.contains(&id)
}

/// Subsystem of every id, indexed by id.
pub(super) const SUBSYSTEMS: [Subsystem; NAMES.len()] = build();

const fn build() -> [Subsystem; NAMES.len()] {
    let mut table = [Subsystem::Other; NAMES.len()];
    let mut i = 1;
    while i < NAMES.len() {
        let mut r = 0;
        while r < PREFIX_RULES.len() {
            if const_starts_with(NAMES[i], PREFIX_RULES[r].0) {
                table[i] = PREFIX_RULES[r].1;
                break;
            }
            r += 1;
        }
        i += 1;
    }
    assign(&mut table, CPU_SCHEDULING, Subsystem::CpuScheduling);
    assign(&mut table, MEMORY, Subsystem::Memory);
    assign(&mut table, DISK_IO, Subsystem::DiskIo);
    assign(&mut table, NETWORK_IO, Subsystem::NetworkIo);
    assign(&mut table, LOCKING, Subsystem::Locking);
    assign(&mut table, PROCESS_MANAGEMENT, Subsystem::ProcessManagement);
    table
}

const fn assign(table: &mut [Subsystem; NAMES.len()], names: &[&str], subsystem: Subsystem) {
    let mut i = 0;
    while i < names.len() {
        table[const_id(names[i]) as usize] = subsystem;
        i += 1;
    }
}

/// The explicit lists, for tests that check no name is listed twice.
#[cfg(test)]
pub(super) fn explicit_lists() -> [(&'static [&'static str], Subsystem); 6] {
    [
        (CPU_SCHEDULING, Subsystem::CpuScheduling),
        (MEMORY, Subsystem::Memory),
        (DISK_IO, Subsystem::DiskIo),
        (NETWORK_IO, Subsystem::NetworkIo),
        (LOCKING, Subsystem::Locking),
        (PROCESS_MANAGEMENT, Subsystem::ProcessManagement),
    ]
}
