//! Whether a silent target's processes sleep of their own accord, read from `/proc`.
//!
//! A target that makes no system call is either waiting (an idle server: every thread
//! in an interruptible sleep, in `epoll_wait`, `accept`, a futex) or held: frozen by a
//! cgroup freezer, stopped by a signal or a debugger, stuck in an uninterruptible wait,
//! or running without calls. The engine cannot tell them apart from the records (an
//! idle nginx is as silent as a frozen one), so the host looks at every thread's state
//! (`/proc/<pid>/task/<tid>/stat`, field 3) and at each process's freezers: a cgroup v2
//! freezer parks tasks in an *interruptible* sleep (its trap inlined into `get_signal`
//! on recent kernels), so the state alone would read a `docker pause`d service as idle.
//! The freezers are read from the process's cgroups (`/proc/<pid>/cgroup`: v2
//! `cgroup.events` "frozen 1", v1 `freezer.state` not "THAWED"), and where each thread
//! sleeps (`wchan`) as well.
//!
//! Anything this cannot read (`wchan` needs ptrace read access: root or
//! `CAP_SYS_PTRACE`), a process whose start time was never read (its pid may be
//! another's now), or a target with more threads than [`MAX_TASKS`], reads as
//! [`Stillness::Unknown`]: the reading under which the engine takes the silence for a
//! stop, as it did before the host could tell.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use faultline_engine::Stillness;

/// Threads read per probe at most: a target with more is not read (the probe runs for
/// a silent target, and each thread costs two small file reads).
pub const MAX_TASKS: usize = 4096;

/// Where the kernel parks a frozen task: the cgroup v1 freezer (and system suspend) in
/// an uninterruptible sleep, the cgroup v2 freezer in an interruptible one
/// (`do_freezer_trap`, which recent kernels inline into `get_signal`: no other
/// interruptible sleep happens there, a signal or ptrace stop shows as `T`/`t`).
const FREEZER_WAITS: [&str; 3] = ["__refrigerator", "do_freezer_trap", "get_signal"];

/// A reading of a silent target's threads, and what it cost, charged to the watch's
/// budget (see [`super::silence::PROBE_BUDGET`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    pub still: Stillness,
    /// In thread reads (two small files each): the threads looked at, plus
    /// [`PROCESS_COST`] per process and one [`PROCESS_COST`] for the mount table.
    pub cost: usize,
}

/// What reading a process's task list and cgroup freezers costs, and the mount table,
/// in thread reads: a host of many small silent targets pays for these more than for
/// their threads.
pub const PROCESS_COST: usize = 2;

/// How the threads of processes `pids` stand, from the machine's `/proc` (as
/// [`super::silence::SilenceWatch::due`] asks it).
pub fn stillness(pids: &[u32]) -> Probe {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .map(|m| CgroupMounts::parse(&m))
        .unwrap_or_default();
    stillness_in(Path::new("/proc"), &mounts, pids.iter().copied())
}

/// [`stillness`] under `proc_root` (a test's stand-in for `/proc`), with the cgroup
/// hierarchies at `mounts`. Asleep only when at least one live thread was read and
/// every one sleeps interruptibly outside a freezer; processes that are gone are
/// skipped (they exited: not held), and so are zombie threads (a process killed
/// outright leaves only its zombie leader: dead, not idle). The first thread not
/// asleep ends the reading.
pub fn stillness_in(
    proc_root: &Path,
    mounts: &CgroupMounts,
    pids: impl IntoIterator<Item = u32>,
) -> Probe {
    let (mut read, mut seen) = (0usize, 0usize);
    // The mount table, read by the caller.
    let mut overhead = PROCESS_COST;
    let unknown = |seen: usize, overhead: usize| Probe {
        still: Stillness::Unknown,
        cost: seen + overhead,
    };
    for pid in pids {
        overhead += PROCESS_COST;
        let dir = proc_root.join(pid.to_string());
        let entries = match std::fs::read_dir(dir.join("task")) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            // Unreadable (hidepid, out of descriptors): not known to be asleep.
            Err(_) => return unknown(seen, overhead),
        };
        if mounts.frozen(&dir) {
            return unknown(seen, overhead);
        }
        for entry in entries {
            let Ok(entry) = entry else {
                return unknown(seen, overhead);
            };
            seen += 1;
            if seen > MAX_TASKS {
                return unknown(seen, overhead);
            }
            match task_asleep(&entry.path()) {
                Some(Task::Asleep) => read += 1,
                Some(Task::Dead) => {}
                // A thread that exited between the listing and the read is no thread.
                None if !entry.path().exists() => {}
                _ => return unknown(seen, overhead),
            }
        }
    }
    if read == 0 {
        unknown(seen, overhead)
    } else {
        Probe {
            still: Stillness::Asleep,
            cost: seen + overhead,
        }
    }
}

/// How one thread stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Task {
    /// In an interruptible sleep outside a freezer.
    Asleep,
    /// A zombie or dead task: makes no call, but is no sign the process waits.
    Dead,
    /// Anything else: frozen, stopped, traced, in an uninterruptible wait, running.
    Held,
}

/// How the task at `dir` stands (`None`: not readable).
fn task_asleep(dir: &Path) -> Option<Task> {
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    match state_of(&stat)? {
        'S' => {
            let wchan = std::fs::read_to_string(dir.join("wchan")).ok()?;
            let wchan = wchan.trim();
            // "0" or empty: the kernel hides where it sleeps (no ptrace access), so a
            // freezer is not ruled out.
            let hidden = wchan.is_empty() || wchan == "0";
            Some(if hidden || FREEZER_WAITS.contains(&wchan) {
                Task::Held
            } else {
                Task::Asleep
            })
        }
        'Z' | 'X' | 'x' => Some(Task::Dead),
        _ => Some(Task::Held),
    }
}

/// Field 3 of a `stat` line: after the command name, which is in parentheses and may
/// hold spaces or ')'.
fn state_of(stat: &str) -> Option<char> {
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    rest.split_whitespace().next()?.chars().next()
}

/// Where this machine mounts the cgroup hierarchies that can freeze a process: the v2
/// (unified) one and the v1 `freezer` controller's, each as (mount point, the cgroup
/// path mounted there).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CgroupMounts {
    v2: Option<(PathBuf, String)>,
    freezer: Option<(PathBuf, String)>,
}

impl CgroupMounts {
    /// From `/proc/self/mountinfo`: `id parent dev root mountpoint options - fstype
    /// source superoptions`; the first mount of each kind counts.
    pub fn parse(mountinfo: &str) -> Self {
        let mut out = Self::default();
        for line in mountinfo.lines() {
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let l: Vec<&str> = left.split_whitespace().collect();
            let r: Vec<&str> = right.split_whitespace().collect();
            let (Some(root), Some(point), Some(fstype)) = (l.get(3), l.get(4), r.first()) else {
                continue;
            };
            let mount = (PathBuf::from(point), (*root).to_owned());
            match *fstype {
                "cgroup2" if out.v2.is_none() => out.v2 = Some(mount),
                "cgroup"
                    if out.freezer.is_none()
                        && r.get(2)
                            .is_some_and(|o| o.split(',').any(|c| c == "freezer")) =>
                {
                    out.freezer = Some(mount)
                }
                _ => {}
            }
        }
        out
    }

    /// Whether a freezer holds the process at `proc_dir` (`/proc/<pid>`), by its
    /// cgroups. A cgroup outside the mounted part of its hierarchy cannot be read: not
    /// known frozen (the threads' states still are).
    fn frozen(&self, proc_dir: &Path) -> bool {
        let Ok(cgroups) = std::fs::read_to_string(proc_dir.join("cgroup")) else {
            return false;
        };
        cgroups.lines().any(|line| {
            let mut parts = line.splitn(3, ':');
            let (Some(id), Some(controllers), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                return false;
            };
            if id == "0" && controllers.is_empty() {
                let events = self.file(&self.v2, path, "cgroup.events");
                events.is_some_and(|e| e.lines().any(|l| l.trim() == "frozen 1"))
            } else if controllers.split(',').any(|c| c == "freezer") {
                let state = self.file(&self.freezer, path, "freezer.state");
                state.is_some_and(|s| s.trim() != "THAWED")
            } else {
                false
            }
        })
    }

    /// The contents of `name` in cgroup `path` of the hierarchy mounted at `mount`.
    fn file(&self, mount: &Option<(PathBuf, String)>, path: &str, name: &str) -> Option<String> {
        let (point, root) = mount.as_ref()?;
        let rel = path.strip_prefix(root.as_str())?.trim_start_matches('/');
        std::fs::read_to_string(point.join(rel).join(name)).ok()
    }
}

/// The tests' record of skipped checks (`$FAULTLINE_SKIP_LOG`), shared with the
/// integration tests.
#[cfg(test)]
#[path = "../../tests/prereq/mod.rs"]
#[allow(clippy::duplicate_mod)] // each module that records skips includes it
mod test_prereq;

#[cfg(test)]
mod tests {
    use super::test_prereq as prereq;
    use super::*;
    use std::fs;

    /// A stand-in `/proc` (and cgroup mount) under a fresh temporary directory, removed
    /// when dropped.
    struct FakeProc {
        root: PathBuf,
    }

    impl FakeProc {
        fn new(name: &str) -> Self {
            let root = std::env::temp_dir().join(format!("fl-proc-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&root);
            fs::create_dir_all(&root).unwrap();
            Self { root }
        }

        /// Process `pid` with threads (state, wchan), in v2 cgroup `/svc`.
        fn process(&self, pid: u32, tasks: &[(char, &str)]) -> &Self {
            for (i, (state, wchan)) in tasks.iter().enumerate() {
                let dir = self
                    .root
                    .join(format!("{pid}/task/{}", u64::from(pid) + i as u64));
                fs::create_dir_all(&dir).unwrap();
                fs::write(dir.join("stat"), format!("{pid} (a) b) {state} 1 2 3\n")).unwrap();
                fs::write(dir.join("wchan"), wchan).unwrap();
            }
            fs::write(
                self.root.join(format!("{pid}/cgroup")),
                "1:freezer:/svc\n0::/svc\n",
            )
            .unwrap();
            self
        }

        /// The fake hierarchies, with `/svc` frozen or not in each.
        fn mounts(&self, v2_frozen: bool, v1_state: &str) -> CgroupMounts {
            let v2 = self.root.join("cg2");
            let v1 = self.root.join("freezer");
            fs::create_dir_all(v2.join("svc")).unwrap();
            fs::create_dir_all(v1.join("svc")).unwrap();
            let events = format!("populated 1\nfrozen {}\n", u8::from(v2_frozen));
            fs::write(v2.join("svc/cgroup.events"), events).unwrap();
            fs::write(v1.join("svc/freezer.state"), format!("{v1_state}\n")).unwrap();
            CgroupMounts::parse(&format!(
                "30 1 0:26 / {} rw - cgroup2 cgroup2 rw\n31 1 0:27 / {} rw - cgroup cgroup rw,freezer\n",
                v2.display(),
                v1.display()
            ))
        }

        fn read(&self, mounts: &CgroupMounts, pids: &[u32]) -> Stillness {
            stillness_in(&self.root, mounts, pids.iter().copied()).still
        }
    }

    impl Drop for FakeProc {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.root);
        }
    }

    #[test]
    fn every_thread_in_a_plain_sleep_is_asleep() {
        let p = FakeProc::new("asleep");
        p.process(40, &[('S', "do_epoll_wait"), ('S', "futex_wait_queue")]);
        let m = p.mounts(false, "THAWED");
        assert_eq!(p.read(&m, &[40]), Stillness::Asleep);
        // A process that is gone is skipped; none left at all is unknown.
        assert_eq!(p.read(&m, &[40, 41]), Stillness::Asleep);
        assert_eq!(p.read(&m, &[41]), Stillness::Unknown);
        // What a reading cost: the threads it looked at, the processes and the mounts.
        assert_eq!(
            stillness_in(&p.root, &m, [40, 41]).cost,
            2 + 3 * PROCESS_COST
        );
    }

    #[test]
    fn frozen_stopped_blocked_or_running_threads_are_not_asleep() {
        for (name, task) in [
            ("v1", ('D', "__refrigerator")),
            ("v2", ('S', "do_freezer_trap")),
            ("v2-inlined", ('S', "get_signal")),
            ("stopped", ('T', "do_signal_stop")),
            ("traced", ('t', "ptrace_stop")),
            ("disk", ('D', "io_schedule")),
            ("running", ('R', "0")),
            ("hidden", ('S', "0")),
        ] {
            let p = FakeProc::new(name);
            p.process(50, &[('S', "do_epoll_wait"), task]);
            let m = p.mounts(false, "THAWED");
            assert_eq!(p.read(&m, &[50]), Stillness::Unknown, "{name}");
        }
    }

    #[test]
    fn a_frozen_cgroup_is_not_asleep_whatever_its_threads_show() {
        let p = FakeProc::new("cgroups");
        p.process(60, &[('S', "do_epoll_wait")]);
        assert_eq!(p.read(&p.mounts(true, "THAWED"), &[60]), Stillness::Unknown);
        assert_eq!(
            p.read(&p.mounts(false, "FROZEN"), &[60]),
            Stillness::Unknown
        );
        assert_eq!(
            p.read(&p.mounts(false, "FREEZING"), &[60]),
            Stillness::Unknown
        );
        assert_eq!(p.read(&p.mounts(false, "THAWED"), &[60]), Stillness::Asleep);
        // Hierarchies not mounted here: only the threads' states say.
        assert_eq!(p.read(&CgroupMounts::default(), &[60]), Stillness::Asleep);
    }

    #[test]
    fn a_process_of_zombies_only_is_not_asleep() {
        // Killed outright (SIGKILL, the OOM killer): its zombie leader waits for its
        // parent; dead, not idle.
        let p = FakeProc::new("zombie");
        p.process(70, &[('Z', "0")]);
        p.process(71, &[('S', "do_epoll_wait"), ('X', "0")]);
        let m = p.mounts(false, "THAWED");
        assert_eq!(p.read(&m, &[70]), Stillness::Unknown);
        assert_eq!(p.read(&m, &[70, 71]), Stillness::Asleep);
    }

    #[test]
    fn mountinfo_gives_the_v2_and_freezer_hierarchies_and_their_roots() {
        let m = CgroupMounts::parse(
            "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
             32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n\
             37 31 0:34 /ns /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer\n\
             41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
             garbage line\n",
        );
        assert_eq!(
            m.v2,
            Some((PathBuf::from("/sys/fs/cgroup/unified"), "/".to_owned()))
        );
        assert_eq!(
            m.freezer,
            Some((PathBuf::from("/sys/fs/cgroup/freezer"), "/ns".to_owned()))
        );
    }

    #[test]
    fn a_command_name_with_parentheses_does_not_shift_the_state() {
        assert_eq!(state_of("7 (a) (b) c) S 1 2"), Some('S'));
        assert_eq!(state_of("7 no parenthesis"), None);
    }

    /// Polls [`stillness`] of `pid` for up to 2 s until it reads `want`.
    fn reads(pid: u32, want: Stillness) -> bool {
        (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            stillness(&[pid]).still == want
        })
    }

    fn sleeper() -> std::process::Child {
        std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep runs")
    }

    /// The real kernel: a sleeping child is asleep, the same child stopped by SIGSTOP
    /// is not.
    #[test]
    fn a_real_sleeping_process_is_asleep_until_stopped() {
        let mut child = sleeper();
        let pid = child.id();
        assert!(
            reads(pid, Stillness::Asleep),
            "a sleeping child reads asleep"
        );
        // SAFETY: plain kill(2) of our own child.
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        assert!(reads(pid, Stillness::Unknown), "a stopped child does not");
        child.kill().ok();
        child.wait().ok();
    }

    /// The real kernel's freezers: a sleeping child whose cgroup is frozen is not
    /// asleep, in each hierarchy this machine mounts writable (CI: root on a hybrid
    /// host, v1 `freezer` and v2 at `/sys/fs/cgroup/unified`; a v2 freeze leaves the
    /// threads in an interruptible sleep).
    #[test]
    fn a_real_frozen_process_is_not_asleep() {
        let mounts = CgroupMounts::parse(&fs::read_to_string("/proc/self/mountinfo").unwrap());
        let name = format!("faultline-test-{}", std::process::id());
        let mut tried = Vec::new();
        let kinds = [
            (&mounts.freezer, "freezer.state", "FROZEN", "THAWED"),
            (&mounts.v2, "cgroup.freeze", "1", "0"),
        ];
        for (mount, freeze, frozen, thawed) in kinds {
            let Some((point, _)) = mount else { continue };
            let dir = point.join(&name);
            if fs::create_dir(&dir).is_err() || !dir.join(freeze).exists() {
                let _ = fs::remove_dir(&dir);
                continue;
            }
            let mut child = sleeper();
            let pid = child.id();
            let result = fs::write(dir.join("cgroup.procs"), pid.to_string()).map(|()| {
                let before = reads(pid, Stillness::Asleep);
                let set = fs::write(dir.join(freeze), frozen).is_ok();
                let during = reads(pid, Stillness::Unknown);
                let _ = fs::write(dir.join(freeze), thawed);
                let after = reads(pid, Stillness::Asleep);
                (before, set, during, after)
            });
            child.kill().ok();
            child.wait().ok();
            // The cgroup can go once its task is gone.
            for _ in 0..100 {
                if fs::remove_dir(&dir).is_ok() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let (before, set, during, after) = result.expect("the child joins the cgroup");
            assert!(
                before && set,
                "{freeze}: asleep before ({before}), frozen ({set})"
            );
            assert!(during, "{freeze}: a frozen child does not read asleep");
            assert!(after, "{freeze}: thawed, it sleeps again");
            tried.push(freeze);
        }
        if tried.is_empty() {
            prereq::skip(&format!(
                "no writable cgroup freezer (not root?): v1 freezer {:?}, v2 {:?}",
                mounts.freezer, mounts.v2
            ));
        } else {
            eprintln!("frozen through {tried:?}");
        }
    }
}
