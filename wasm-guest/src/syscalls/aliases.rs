//! Other spellings of canonical syscall names, as tracers and 32-bit hosts emit them.
//!
//! LTTng names calls after kernel symbols (`newfstat`, `mmap_pgoff`), 32-bit ABIs have
//! `*64`/`*32`/`*_time64` twins, and older tools use legacy names. Each maps to the call
//! a 64-bit host would make, so baselines and rankings see one call, not two.

use super::{const_cmp, const_id};

/// `(alias, canonical)`, sorted by alias (checked at compile time).
pub(super) const ALIASES: [(&str, &str); 59] = [
    ("_llseek", "lseek"),
    ("_newselect", "select"),
    ("arm_fadvise64_64", "fadvise64"),
    ("chown32", "chown"),
    ("clock_adjtime64", "clock_adjtime"),
    ("clock_getres_time64", "clock_getres"),
    ("clock_gettime64", "clock_gettime"),
    ("clock_nanosleep_time64", "clock_nanosleep"),
    ("clock_settime64", "clock_settime"),
    ("fadvise64_64", "fadvise64"),
    ("fchown32", "fchown"),
    ("fcntl64", "fcntl"),
    ("fstat64", "fstat"),
    ("fstatat", "newfstatat"),
    ("fstatat64", "newfstatat"),
    ("fstatfs64", "fstatfs"),
    ("ftruncate64", "ftruncate"),
    ("futex_time64", "futex"),
    ("getegid32", "getegid"),
    ("geteuid32", "geteuid"),
    ("getgid32", "getgid"),
    ("getgroups32", "getgroups"),
    ("getresgid32", "getresgid"),
    ("getresuid32", "getresuid"),
    ("getuid32", "getuid"),
    ("io_pgetevents_time64", "io_pgetevents"),
    ("lchown32", "lchown"),
    ("llseek", "lseek"),
    ("lstat64", "lstat"),
    ("mmap2", "mmap"),
    ("mmap_pgoff", "mmap"),
    ("newfstat", "fstat"),
    ("newlstat", "lstat"),
    ("newstat", "stat"),
    ("newuname", "uname"),
    ("old_mmap", "mmap"),
    ("old_select", "select"),
    ("ppoll_time64", "ppoll"),
    ("pread", "pread64"),
    ("pselect6_time64", "pselect6"),
    ("pwrite", "pwrite64"),
    ("recv", "recvfrom"),
    ("recvmmsg_time64", "recvmmsg"),
    ("rt_sigtimedwait_time64", "rt_sigtimedwait"),
    ("semtimedop_time64", "semtimedop"),
    ("send", "sendto"),
    ("sendfile64", "sendfile"),
    ("setgid32", "setgid"),
    ("setuid32", "setuid"),
    ("sigreturn", "rt_sigreturn"),
    ("stat64", "stat"),
    ("statfs64", "statfs"),
    ("sync_file_range2", "sync_file_range"),
    ("sysctl", "_sysctl"),
    ("timerfd_gettime64", "timerfd_gettime"),
    ("timerfd_settime64", "timerfd_settime"),
    ("truncate64", "truncate"),
    ("umount", "umount2"),
    ("waitpid", "wait4"),
];

/// The canonical id of each alias, resolved at compile time.
pub(super) const IDS: [u16; ALIASES.len()] = resolve();

const fn resolve() -> [u16; ALIASES.len()] {
    let mut ids = [0u16; ALIASES.len()];
    let mut i = 0;
    while i < ALIASES.len() {
        if i > 0 {
            let ord = const_cmp(ALIASES[i - 1].0.as_bytes(), ALIASES[i].0.as_bytes());
            if !matches!(ord, core::cmp::Ordering::Less) {
                panic!("ALIASES must be sorted by alias");
            }
        }
        ids[i] = const_id(ALIASES[i].1);
        i += 1;
    }
    ids
}

/// Every `(alias, canonical)` pair, for tests.
#[cfg(test)]
pub(super) fn all() -> &'static [(&'static str, &'static str)] {
    &ALIASES
}
