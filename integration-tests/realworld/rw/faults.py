"""Environmental (external) faults, the same for every application: they change the server's
surroundings, never its code. Application-specific (internal) faults live in each app."""
import os
import signal
import subprocess
import threading
import time

from .env import Autogroup, mono_ns


class Fault:
    """A fault is started once and stopped once; `details` is written to truth.json."""

    klass = "external"
    subsystem = ""
    description = ""
    #: the case ends or pauses the load at the fault start (the idle cases): the client sees
    #: no request in the fault phase by design, so its "hurt" is not computed
    stops_load = False

    def __init__(self):
        self.details = {}
        self.load = None

    def attach_load(self, load):
        """The case's running LoadHandle, given right after the load starts."""
        self.load = load

    def arm(self, env, app):
        """Before the load and the trace start (e.g. connect a session)."""

    def start(self, env, app):
        raise NotImplementedError

    def stop(self, env, app):
        pass


class CpuCap(Fault):
    subsystem = "cpu"

    def __init__(self, fraction=None):
        """`fraction` of one CPU; default: the app's `cpu_cap_fraction` (marginal: just below
        its demand under the standard load)."""
        super().__init__()
        self.fraction = fraction

    def start(self, env, app):
        frac = self.fraction or app.cpu_cap_fraction
        self.description = f"cgroup CPU quota: the server capped at {frac * 100:.0f}% of one CPU"
        self.details = {"quota_fraction": frac}
        env.cgroup.set_cpu_quota(frac)

    def stop(self, env, app):
        env.cgroup.set_cpu_quota(None)


class CpuHog(Fault):
    """Co-located CPU hogs on the server's CPU, outside its cgroup (a noisy neighbour)."""

    subsystem = "cpu"

    def __init__(self, hogs=8):
        super().__init__()
        self.hogs = hogs
        self.proc = None
        self.autogroup = Autogroup()

    def start(self, env, app):
        self.description = f"{self.hogs} stress-ng --cpu workers pinned to the server's CPU {env.server_cpu}, kernel autogroup off"
        self.details = {"hogs": self.hogs, "cpu": env.server_cpu}
        self.autogroup.disable()
        self.proc = subprocess.Popen(
            ["taskset", "-c", str(env.server_cpu), "stress-ng", "--quiet", "--cpu", str(self.hogs), "--cpu-method", "int64"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def stop(self, env, app):
        if self.proc:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.autogroup.restore()


class DiskHog(Fault):
    """A co-located writer on the server's disk: large direct writes with fsync, on the client
    CPU so it competes for the disk only."""

    subsystem = "disk"

    def __init__(self, writers=2):
        super().__init__()
        self.writers = writers
        self.procs = []

    def start(self, env, app):
        self.description = f"{self.writers} co-located dd writers (1 MiB direct writes + fdatasync) on the server's file system"
        self.details = {"writers": self.writers, "dir": app.data_dir(env)}
        for i in range(self.writers):
            path = os.path.join(app.data_dir(env), "..", f"disk-hog-{i}")
            loop = f"while true; do dd if=/dev/zero of={path} bs=1M count=256 oflag=direct conv=fdatasync status=none; done"
            self.procs.append(subprocess.Popen(env.client_argv(["sh", "-c", loop]), start_new_session=True))

    def stop(self, env, app):
        for p in self.procs:
            try:
                os.killpg(p.pid, 9)
            except ProcessLookupError:
                pass
            p.wait()
        for i in range(self.writers):
            try:
                os.unlink(os.path.join(app.data_dir(env), "..", f"disk-hog-{i}"))
            except OSError:
                pass


class MemCap(Fault):
    """A cgroup memory limit stepped down to a few MiB below the server's RSS plus mapped file
    pages (no swap here: a limit above the working set does nothing, far below it OOM-kills)."""

    subsystem = "memory"

    def __init__(self):
        super().__init__()
        self.stop_flag = threading.Event()
        self.thread = None

    def _stat(self, env):
        path = os.path.join("/sys/fs/cgroup/memory", env.cgroup.name, "memory.stat")
        stat = {}
        try:
            with open(path) as f:
                for line in f:
                    k, v = line.split()
                    stat[k] = int(v)
        except OSError:
            pass
        return stat

    def start(self, env, app):
        stat = self._stat(env)
        usage = env.cgroup.memory_usage()
        rss = stat.get("total_rss", stat.get("rss", 0))
        mapped = stat.get("total_mapped_file", stat.get("mapped_file", 0))
        target = max(rss + 2 * 2**20, rss + mapped - app.mem_cap_below_bytes)
        self.description = (
            f"cgroup memory limit stepped from {usage >> 20} MiB down to {target >> 20} MiB "
            f"(RSS {rss >> 20} MiB + mapped files {mapped >> 20} MiB, no swap)"
        )
        self.details = {"usage_bytes": usage, "rss_bytes": rss, "mapped_file_bytes": mapped, "target_bytes": target,
                        "oom_kills_before": env.cgroup.oom_kills()}
        # Step down over ~2 s so reclaim keeps up; the kernel answers EBUSY when it cannot.
        steps = 10
        reached = usage
        for i in range(1, steps + 1):
            limit = usage - (usage - target) * i // steps
            if env.cgroup.set_memory_limit(limit):
                reached = limit
            time.sleep(0.2)
        self.details["limit_bytes"] = reached

    def stop(self, env, app):
        env.cgroup.set_memory_limit(None)
        self.details["oom_kills_after"] = env.cgroup.oom_kills()


class NetLoss(Fault):
    subsystem = "network"

    def __init__(self, percent=10):
        super().__init__()
        self.percent = percent

    def start(self, env, app):
        self.description = f"{self.percent}% random packet loss both ways on the server's veth (nftables numgen rule in its namespace)"
        self.details = {"loss_percent": self.percent}
        env.netns.set_loss(self.percent)

    def stop(self, env, app):
        env.netns.set_loss(None)


class Freeze(Fault):
    """The server's whole cgroup frozen for the fault phase and thawed at stop: what `docker
    pause`, a cgroup freezer or a VM pause does. Every thread stops at once and makes no system
    call at all while frozen, so a syscall tracer sees silence, not slow calls: the freezer
    wakes blocked calls like a signal, they return at once (-EINTR, -ERESTART*) and restart
    at the thaw (measured: 9 such exits from MariaDB, 17 from PostgreSQL, then no event).

    Without a freezer, SIGSTOP/SIGCONT to every process of the cgroup stands in: the same
    stop, but not atomic across processes."""

    # Every thread stopped at once: the engine's CPU/scheduling hint, as for a CPU cap.
    subsystem = "cpu"

    def __init__(self, use_freezer=True):
        """`use_freezer=False` forces the SIGSTOP fallback (to compare the two)."""
        super().__init__()
        self.use_freezer = use_freezer
        self.stopped_pids = []

    def start(self, env, app):
        method = env.cgroup.freezer() if self.use_freezer else None
        pids = env.cgroup.pids()
        self.details = {"method": method or "SIGSTOP/SIGCONT", "pids": pids}
        if method:
            self.description = f"the server's whole cgroup frozen for the fault phase ({method}), thawed at its end"
            ok = env.cgroup.freeze()
        else:
            self.description = ("every server process stopped with SIGSTOP for the fault phase (no cgroup freezer), "
                                "SIGCONT at its end")
            self.stopped_pids = pids
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGSTOP)
                except ProcessLookupError:
                    pass
            ok = self._wait_stopped(pids)
        self.details["frozen_ns"] = mono_ns()
        self.details["all_stopped"] = ok

    @staticmethod
    def _wait_stopped(pids, timeout=10.0):
        """True once every thread of `pids` is in the stopped state (T)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = []
            for pid in pids:
                task_dir = f"/proc/{pid}/task"
                try:
                    tids = os.listdir(task_dir)
                except OSError:
                    continue
                for tid in tids:
                    try:
                        with open(f"{task_dir}/{tid}/stat") as f:
                            states.append(f.read().rsplit(")", 1)[1].split()[0])
                    except (OSError, IndexError):
                        pass
            # No state read at all (every process gone) is no freeze either.
            if states and all(s in ("T", "t") for s in states):
                return True
            time.sleep(0.01)
        return False

    def stop(self, env, app):
        """Thaws whatever start froze; safe to call again, or after a start that failed midway."""
        if "thawed_ns" in self.details:
            return
        env.cgroup.thaw()
        for pid in self.stopped_pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.details["thawed_ns"] = mono_ns()


class NoFault(Fault):
    """A control run: same phases, nothing injected."""

    klass = "none"
    subsystem = "none"
    description = "fault-free control run"

    def start(self, env, app):
        pass


class Idle(NoFault):
    """Traffic stops (at night, a drained node): the load client is ended at the fault phase's
    start, its connections close, and the server is left alone for the fault phase. Nothing is
    wrong with the server: its threads wait in epoll_wait/poll/futex/recv for clients that do
    not come, maybe with every thread silent for the whole phase. Judged like a control: any
    verdict but `none` after the load stopped is a false alarm (of silence detection above all)."""

    stops_load = True
    description = "fault-free: the load client ended at the fault phase's start (connections closed), the server left idle"

    def start(self, env, app):
        self.details = {"load": "ended (SIGTERM) at the fault start: connections closed"}
        self.load.halt()
        self.details["load_stopped_ns"] = mono_ns()


class IdleConnected(NoFault):
    """Like `Idle`, but the clients keep their connections open and send nothing: every client
    process is stopped with SIGSTOP at the fault start, and killed at its end (SIGKILL: a
    continued open-loop client would send its backlog in a burst). The server's connection
    threads wait in recv/poll on live sockets. The server may still close them itself: Apache
    after its KeepAliveTimeout (5 s), MariaDB and PostgreSQL not within a case."""

    stops_load = True
    description = ("fault-free: the load clients stopped with SIGSTOP at the fault phase's start (connections open, "
                   "nothing sent), the server left idle")

    def start(self, env, app):
        self.details = {"load": "clients stopped (SIGSTOP) at the fault start, connections open; SIGKILL at the end"}
        self.load.pause()
        self.details["load_paused_ns"] = mono_ns()

    def stop(self, env, app):
        if self.load is not None and not self.load.halted:
            self.load.halt()
            self.details["load_killed_ns"] = mono_ns()


#: fault-free cases where the traffic stops at the fault start (judged as controls)
IDLE = {
    "idle": Idle,
    "idle_connected": IdleConnected,
}

EXTERNAL = {
    "cpu_cap": CpuCap,
    "cpu_hog": CpuHog,
    "disk": DiskHog,
    "freeze": Freeze,
    "mem_cap": MemCap,
    "net_loss": NetLoss,
}
