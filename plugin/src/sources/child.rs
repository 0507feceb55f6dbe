//! Child tools (`perf`, `babeltrace2`) that another thread may stop.
//!
//! Stopping a live capture means signalling the tool from the runtime while a blocking
//! reader owns its handle. A bare pid is unsafe for that: once the reader has reaped the
//! child the kernel may give the pid to an unrelated process. So the reaper and the
//! stopper share a flag under one lock, and the child is reaped only under that lock
//! (after waiting for its exit without reaping it, so the lock is never held across a
//! long wait): a signal goes out only while the pid is still ours, alive or a zombie.
//!
//! The shared state also remembers which signal we sent, so the reader can tell the end
//! it asked for (death by that signal) from the tool failing.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// The state a child's reaper and its stoppers share.
/// Every tool started, for [`terminate_all`]: they run in their own process groups (a
/// terminal's Ctrl-C does not reach them), so a forced exit must stop them itself.
static STARTED: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());

/// Sends SIGTERM to every tool still running; for an exit that skips the ordered
/// shutdown (a second signal). Returns how many were signalled.
pub fn terminate_all() -> usize {
    let started = STARTED.lock().unwrap_or_else(|e| e.into_inner());
    started
        .iter()
        .filter_map(Weak::upgrade)
        .filter(|s| s.signal(libc::SIGTERM))
        .count()
}

#[derive(Debug)]
struct Shared {
    pid: u32,
    flags: Mutex<Flags>,
}

#[derive(Debug, Default)]
struct Flags {
    /// The child was reaped: its pid may belong to someone else now.
    reaped: bool,
    /// The signal a stopper sent, if any.
    sent: Option<i32>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Flags> {
        self.flags.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends `signal` unless the child was reaped; whether it was sent.
    fn signal(&self, signal: i32) -> bool {
        let mut flags = self.lock();
        if flags.reaped {
            return false;
        }
        let Ok(pid) = libc::pid_t::try_from(self.pid) else {
            return false;
        };
        // SAFETY: kill(2) takes plain integers and touches no memory of ours; the pid is
        // our unreaped child (the lock keeps the reaper out), so it names no other process.
        let sent = unsafe { libc::kill(pid, signal) } == 0;
        if sent {
            flags.sent = Some(signal);
        }
        sent
    }
}

/// A child process whose pid is only ever signalled while it is still ours.
#[derive(Debug)]
pub(crate) struct TrackedChild {
    child: Child,
    shared: Arc<Shared>,
}

impl TrackedChild {
    pub(crate) fn new(child: Child) -> Self {
        let shared = Arc::new(Shared {
            pid: child.id(),
            flags: Mutex::new(Flags::default()),
        });
        let mut started = STARTED.lock().unwrap_or_else(|e| e.into_inner());
        started.retain(|w| w.strong_count() > 0);
        started.push(Arc::downgrade(&shared));
        drop(started);
        Self { child, shared }
    }

    pub(crate) fn id(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the child to end and reaps it.
    pub(crate) fn wait(&mut self) -> io::Result<ExitStatus> {
        wait_for_exit(self.child.id());
        let mut flags = self.shared.lock();
        let status = self.child.wait()?;
        flags.reaped = true;
        Ok(status)
    }

    /// Kills the child (unless already reaped) and reaps it, ignoring errors: for
    /// stopping early, so no tool keeps running and no zombie stays behind.
    pub(crate) fn kill_and_reap(&mut self) {
        {
            let flags = self.shared.lock();
            if flags.reaped {
                return;
            }
            let _ = self.child.kill();
        }
        let _ = self.wait();
    }

    /// Whether `status` is the end a stopper asked for: death by exactly the signal it
    /// sent. Any other end (an exit code, another signal) is the tool's own.
    pub(crate) fn stopped_by_us(&self, status: ExitStatus) -> bool {
        let sent = self.shared.lock().sent;
        sent.is_some() && status.signal() == sent
    }

    /// A handle that can stop this child from another thread.
    pub(crate) fn stopper(&self) -> ChildStopper {
        ChildStopper(vec![self.shared.clone()])
    }
}

/// Waits until the child `pid` has exited without reaping it (`WNOWAIT`), so it stays a
/// zombie holding its pid until reaped under the lock. Errors are left to the reaping
/// wait, which reports them.
fn wait_for_exit(pid: u32) {
    let id: libc::id_t = pid;
    loop {
        // SAFETY: an all-zero siginfo_t is a valid value (plain integers and unions of them).
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid(2) writes only into `info`, which lives for the call.
        let rc = unsafe { libc::waitid(libc::P_PID, id, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if rc == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// Stops the producers of a live source (see [`crate::sources::input::ChildOutput::stopper`]);
/// empty for sources that are not child processes. Cheap to clone and `Send`.
#[derive(Clone, Debug, Default)]
pub struct ChildStopper(Vec<Arc<Shared>>);

impl ChildStopper {
    /// One stopper for all of `stoppers`' children.
    pub(crate) fn join(stoppers: impl IntoIterator<Item = ChildStopper>) -> Self {
        Self(stoppers.into_iter().flat_map(|s| s.0).collect())
    }

    /// Whether there is no child to stop.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Sends SIGTERM to every child not reaped yet; how many were signalled. A child that
    /// dies by it ends its output cleanly (see `TrackedChild::stopped_by_us`).
    pub fn terminate(&self) -> usize {
        self.0.iter().filter(|s| s.signal(libc::SIGTERM)).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn spawn(script: &str) -> TrackedChild {
        TrackedChild::new(Command::new("sh").args(["-c", script]).spawn().unwrap())
    }

    #[test]
    fn a_reaped_child_is_never_signalled() {
        let mut child = spawn("exit 0");
        let stopper = child.stopper();
        assert!(child.wait().unwrap().success());
        // Its pid may be another process's by now.
        assert_eq!(stopper.terminate(), 0);
        let status = child.wait().unwrap();
        assert!(!child.stopped_by_us(status));
    }

    #[test]
    fn death_by_our_signal_is_told_from_the_tools_own_end() {
        let mut child = spawn("exec sleep 30");
        let stopper = child.stopper();
        assert_eq!(stopper.terminate(), 1);
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGTERM));
        assert!(child.stopped_by_us(status));

        // Killed by another signal: not our stop.
        let mut other = spawn("kill -KILL $$");
        let status = other.wait().unwrap();
        assert!(!other.stopped_by_us(status));
        // Signalled by us after it exited on its own (a zombie still): its own end.
        let mut failed = spawn("exit 3");
        wait_for_exit(failed.id());
        assert_eq!(failed.stopper().terminate(), 1);
        let status = failed.wait().unwrap();
        assert_eq!(status.code(), Some(3));
        assert!(!failed.stopped_by_us(status));
    }
}
