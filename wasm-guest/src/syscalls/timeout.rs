//! Whether a long call ended by its own timeout: a wait that timed out waited as long as
//! it asked to, so its length says nothing about what it waited for.
//!
//! A background thread's periodic timed wait (MariaDB's 5 s `futex` waits) is long by
//! design; a lock's waiter woken by the lock's release, or a write the disk held up, is
//! long because something held it. Only the return value tells the two apart.

use super::SyscallId;

/// `-EAGAIN`, `-ETIMEDOUT`, `-ETIME` (x86_64 and aarch64 share these numbers): what
/// `futex`, `semtimedop`, `rt_sigtimedwait`, `mq_timedreceive`, `io_uring_enter` and
/// sockets with a receive timeout return when their time is up.
const TIMEOUT_ERRORS: [i64; 3] = [-11, -110, -62];

/// Waits that return 0 when their timeout expires with nothing ready (and sleeps, which
/// always end that way).
const ZERO_ON_TIMEOUT: [&str; 12] = [
    "epoll_wait",
    "epoll_pwait",
    "epoll_pwait2",
    "poll",
    "ppoll",
    "select",
    "pselect6",
    "io_getevents",
    "io_pgetevents",
    "nanosleep",
    "clock_nanosleep",
    "restart_syscall",
];

/// Waits whose end, without a return value, may have been their timeout.
const TIMED_WAITS: [&str; 2] = ["futex", "futex_waitv"];

/// Whether `call`, returning `ret`, ended by its own timeout (or may have: a timed wait
/// whose return value the source did not give).
pub fn ended_by_timeout(call: SyscallId, ret: Option<i64>) -> bool {
    let name = call.name();
    let zero_on_timeout = ZERO_ON_TIMEOUT.contains(&name);
    match ret {
        Some(r) => TIMEOUT_ERRORS.contains(&r) || (zero_on_timeout && r == 0),
        None => zero_on_timeout || TIMED_WAITS.contains(&name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str) -> SyscallId {
        SyscallId::from_name(name)
    }

    #[test]
    fn a_timed_out_wait_is_told_from_a_woken_one() {
        assert!(ended_by_timeout(id("futex"), Some(-110)));
        assert!(!ended_by_timeout(id("futex"), Some(0)));
        assert!(ended_by_timeout(id("epoll_wait"), Some(0)));
        assert!(!ended_by_timeout(id("epoll_wait"), Some(1)));
        assert!(ended_by_timeout(id("nanosleep"), Some(0)));
        assert!(ended_by_timeout(id("recvfrom"), Some(-11)));
    }

    #[test]
    fn work_calls_never_time_out_and_unknown_waits_may_have() {
        assert!(!ended_by_timeout(id("fdatasync"), Some(0)));
        assert!(!ended_by_timeout(id("pwrite64"), None));
        assert!(ended_by_timeout(id("futex"), None));
        assert!(ended_by_timeout(id("poll"), None));
    }
}
