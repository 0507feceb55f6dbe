"""Whether the server's processes sleep of their own accord: the reading `faultline run`
takes from /proc for a silent live target (plugin/src/pipeline/process_state.rs), taken by
the harness at the alarm and at the fault's end so offline diagnoses (`analyze
--recorded-asleep`) judge a silence as the live plugin did. Same rules; it reads every
process of the server's cgroup, where the plugin reads the latest 16 that made a record."""
import os

#: where frozen tasks sleep: v1 freezer, v2 freezer (inlined into get_signal on recent kernels)
FREEZER_WAITS = ("__refrigerator", "do_freezer_trap", "get_signal")
MAX_TASKS = 4096


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _mounts():
    """{"v2": (mount point, root), "freezer": (mount point, root)} from /proc/self/mountinfo."""
    out = {}
    for line in (_read("/proc/self/mountinfo") or "").splitlines():
        left, sep, right = line.partition(" - ")
        l, r = left.split(), right.split()
        if not sep or len(l) < 5 or not r:
            continue
        if r[0] == "cgroup2":
            out.setdefault("v2", (l[4], l[3]))
        elif r[0] == "cgroup" and len(r) > 2 and "freezer" in r[2].split(","):
            out.setdefault("freezer", (l[4], l[3]))
    return out


def _cgroup_file(mount, path, name):
    if mount is None or not path.startswith(mount[1]):
        return None
    return _read(os.path.join(mount[0], path[len(mount[1]):].lstrip("/"), name))


def _frozen(pid, mounts):
    for line in (_read(f"/proc/{pid}/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hid, controllers, path = parts
        if hid == "0" and controllers == "":
            events = _cgroup_file(mounts.get("v2"), path, "cgroup.events") or ""
            if any(l.strip() == "frozen 1" for l in events.splitlines()):
                return True
        elif "freezer" in controllers.split(","):
            state = _cgroup_file(mounts.get("freezer"), path, "freezer.state")
            if state is not None and state.strip() != "THAWED":
                return True
    return False


def asleep(pids):
    """True when at least one live thread of `pids` was read and every one sleeps
    interruptibly in no frozen cgroup (zombie threads are skipped); False otherwise (frozen,
    stopped, in an uninterruptible wait, running, unreadable, or more than MAX_TASKS)."""
    mounts = _mounts()
    read = seen = 0
    for pid in pids:
        task_dir = f"/proc/{pid}/task"
        try:
            tids = os.listdir(task_dir)
        except FileNotFoundError:
            continue
        except OSError:
            return False
        if _frozen(pid, mounts):
            return False
        for tid in tids:
            seen += 1
            if seen > MAX_TASKS:
                return False
            stat = _read(f"{task_dir}/{tid}/stat")
            if stat is None:
                if os.path.exists(f"{task_dir}/{tid}"):
                    return False
                continue
            state = stat[stat.rfind(")") + 1:].split()[0]
            if state in ("Z", "X", "x"):
                continue
            if state != "S":
                return False
            wchan = (_read(f"{task_dir}/{tid}/wchan") or "").strip()
            if wchan in ("", "0") or wchan in FREEZER_WAITS:
                return False
            read += 1
    return read > 0
