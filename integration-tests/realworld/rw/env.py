"""The experiment's sandbox: a network namespace with a veth into it, a server cgroup pinned
to one CPU, and helpers to start processes inside them.

Why a namespace: packet loss is injected by an nftables rule *inside* the namespace, so no
interface or address of the machine is touched. Why a cgroup: CPU and memory caps apply to
the server only, and the server's CPU is kept apart from the client's (a CPU fault must hit
the server, not the load generator).

Works with cgroup v1 (cpu, cpuset, memory controllers, as on this machine kind; freezer when
mounted) and v2.
"""
import os
import shutil
import subprocess
import time

NETNS = "flrw"
HOST_IF = "flrw0"
NS_IF = "flrw1"
HOST_IP = "10.231.7.1"
SERVER_IP = "10.231.7.2"
CGROUP_NAME = "faultline-rw-server"
V1_ROOT = "/sys/fs/cgroup"
V1_CONTROLLERS = ("cpu", "cpuset", "memory")
# Joined when its hierarchy is mounted: the freeze fault falls back to SIGSTOP without it.
V1_OPTIONAL = ("freezer",)
FREEZE_TIMEOUT_S = 10.0


def sh(*argv, check=True, quiet=False, **kw):
    """Runs a command; raises with its stderr when `check` and it fails."""
    r = subprocess.run(list(argv), capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
    if not quiet and r.returncode != 0:
        print(f"  (ignored) {' '.join(argv)}: {r.stderr.strip()}")
    return r


def mono_ns():
    """CLOCK_MONOTONIC in ns: the clock `perf record -k CLOCK_MONOTONIC` stamps events with."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


class Cgroup:
    """The server's cgroup (v1 controllers or v2 unified)."""

    def __init__(self, name=CGROUP_NAME):
        self.name = name
        self.v2 = not os.path.isdir(os.path.join(V1_ROOT, "cpu")) and os.path.exists(
            os.path.join(V1_ROOT, "cgroup.controllers")
        )
        self.controllers = V1_CONTROLLERS + tuple(
            c for c in V1_OPTIONAL if os.path.exists(os.path.join(V1_ROOT, c, "cgroup.procs")))

    def _dir(self, controller):
        if self.v2:
            return os.path.join(V1_ROOT, self.name)
        return os.path.join(V1_ROOT, controller, self.name)

    def _write(self, controller, key, value):
        with open(os.path.join(self._dir(controller), key), "w") as f:
            f.write(str(value))

    def _read(self, controller, key):
        with open(os.path.join(self._dir(controller), key)) as f:
            return f.read().strip()

    def create(self, cpus):
        if self.v2:
            with open(os.path.join(V1_ROOT, "cgroup.subtree_control"), "w") as f:
                f.write("+cpu +cpuset +memory")
            os.makedirs(self._dir(None), exist_ok=True)
            self._write(None, "cpuset.cpus", cpus)
        else:
            for c in self.controllers:
                os.makedirs(self._dir(c), exist_ok=True)
            self._write("cpuset", "cpuset.mems", self._read_root_mems())
            self._write("cpuset", "cpuset.cpus", cpus)
        self.reset_limits()

    def _read_root_mems(self):
        with open(os.path.join(V1_ROOT, "cpuset", "cpuset.mems")) as f:
            return f.read().strip()

    def procs_files(self):
        """Files a process writes its pid into to join every controller."""
        if self.v2:
            return [os.path.join(self._dir(None), "cgroup.procs")]
        return [os.path.join(self._dir(c), "cgroup.procs") for c in self.controllers]

    def pids(self):
        """Every process currently in the server cgroup."""
        try:
            text = self._read("cpu", "cgroup.procs")
        except OSError:
            return []
        return sorted(int(p) for p in text.split())

    def set_cpu_quota(self, fraction):
        """Caps the server at `fraction` of one CPU (None removes the cap)."""
        period = 100_000
        if self.v2:
            self._write(None, "cpu.max", "max 100000" if fraction is None else f"{int(period * fraction)} {period}")
        else:
            self._write("cpu", "cpu.cfs_period_us", period)
            self._write("cpu", "cpu.cfs_quota_us", -1 if fraction is None else int(period * fraction))

    def memory_usage(self):
        """Bytes charged to the server (RSS plus page cache)."""
        return int(self._read("memory", "memory.current" if self.v2 else "memory.usage_in_bytes"))

    def set_memory_limit(self, limit):
        """Sets the hard memory limit in bytes (None removes it); False when the kernel refuses
        (EBUSY: it could not reclaim below the new limit)."""
        key = "memory.max" if self.v2 else "memory.limit_in_bytes"
        value = ("max" if self.v2 else -1) if limit is None else int(limit)
        try:
            self._write("memory", key, value)
            return True
        except OSError:
            return False

    def oom_kills(self):
        """OOM kills in the cgroup so far (a memory case that kills the server is invalid)."""
        try:
            if self.v2:
                for line in self._read(None, "memory.events").splitlines():
                    k, v = line.split()
                    if k == "oom_kill":
                        return int(v)
                return 0
            for line in self._read("memory", "memory.oom_control").splitlines():
                k, v = line.split()
                if k == "oom_kill":
                    return int(v)
        except (OSError, ValueError):
            pass
        return 0

    def freezer(self):
        """How this cgroup can be frozen: "cgroup v2 cgroup.freeze", "cgroup v1 freezer.state",
        or None (no freezer: the freeze fault then stops the processes with SIGSTOP)."""
        if self.v2:
            return "cgroup v2 cgroup.freeze" if os.path.exists(os.path.join(self._dir(None), "cgroup.freeze")) else None
        if "freezer" in self.controllers and os.path.exists(os.path.join(self._dir("freezer"), "freezer.state")):
            return "cgroup v1 freezer.state"
        return None

    def frozen(self):
        """True when every task is frozen (v1 reads FREEZING while some task has not stopped yet)."""
        if self.v2:
            return "frozen 1" in self._read(None, "cgroup.events").splitlines()
        return self._read("freezer", "freezer.state") == "FROZEN"

    def freeze(self, timeout=FREEZE_TIMEOUT_S):
        """Freezes every task of the cgroup at once; True once the kernel reports them all frozen.
        A v1 freeze stays FREEZING while a task cannot stop (e.g. in an uninterruptible wait)
        and is retried by writing FROZEN again (cgroup-v1/freezer-subsystem.rst)."""
        deadline = time.monotonic() + timeout
        while True:
            if self.v2:
                self._write(None, "cgroup.freeze", 1)
            else:
                self._write("freezer", "freezer.state", "FROZEN")
            for _ in range(20):
                if self.frozen():
                    return True
                time.sleep(0.01)
            if time.monotonic() > deadline:
                return False

    def thaw(self):
        """Thaws the cgroup (a no-op when it is not frozen or has no freezer): a frozen server
        ignores its shutdown, and on v1 even SIGKILL until thawed."""
        mode = self.freezer()
        if mode is None:
            return
        if self.v2:
            self._write(None, "cgroup.freeze", 0)
        else:
            self._write("freezer", "freezer.state", "THAWED")
        for _ in range(500):
            if not self.frozen() and (self.v2 or self._read("freezer", "freezer.state") == "THAWED"):
                return
            time.sleep(0.01)
        raise RuntimeError(f"{self.name} still frozen after thawing ({mode})")

    def reset_limits(self):
        self.set_cpu_quota(None)
        self.set_memory_limit(None)
        self.thaw()  # a run killed during a freeze fault leaves the cgroup frozen

    def destroy(self):
        try:
            self.thaw()
        except (OSError, RuntimeError) as e:
            print(f"  (ignored) thawing {self.name}: {e}")
        for pid in self.pids():
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        dirs = [self._dir(None)] if self.v2 else [self._dir(c) for c in self.controllers]
        for d in dirs:
            for _ in range(50):
                try:
                    if os.path.isdir(d):
                        os.rmdir(d)
                    break
                except OSError:
                    time.sleep(0.1)


class Netns:
    """A namespace with a /30 veth link: the server listens on SERVER_IP inside it."""

    def create(self):
        self.destroy()
        sh("ip", "netns", "add", NETNS)
        sh("ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", NS_IF)
        sh("ip", "link", "set", NS_IF, "netns", NETNS)
        sh("ip", "addr", "add", f"{HOST_IP}/30", "dev", HOST_IF)
        sh("ip", "link", "set", HOST_IF, "up")
        sh("ip", "netns", "exec", NETNS, "ip", "addr", "add", f"{SERVER_IP}/30", "dev", NS_IF)
        sh("ip", "netns", "exec", NETNS, "ip", "link", "set", NS_IF, "up")
        sh("ip", "netns", "exec", NETNS, "ip", "link", "set", "lo", "up")

    def destroy(self):
        sh("ip", "link", "del", HOST_IF, check=False, quiet=True)
        sh("ip", "netns", "del", NETNS, check=False, quiet=True)

    def set_loss(self, percent):
        """Drops `percent`% of the packets entering the server (None removes the rule): an
        nftables rule in the namespace, because this kernel has no sch_netem for `tc netem`."""
        sh("ip", "netns", "exec", NETNS, "nft", "delete", "table", "inet", "flrw", check=False, quiet=True)
        if percent is None:
            return
        rules = (
            "table inet flrw {\n"
            "  chain in { type filter hook input priority 0; policy accept;\n"
            f"    numgen random mod 100 < {int(percent)} drop\n  }}\n"
            "  chain out { type filter hook output priority 0; policy accept;\n"
            f"    numgen random mod 100 < {int(percent)} drop\n  }}\n"
            "}\n"
        )
        sh("ip", "netns", "exec", NETNS, "nft", "-f", "-", input=rules)


class Env:
    """Where a case runs: namespace, server cgroup, CPUs, work directory."""

    def __init__(self, workdir, server_cpu=1, client_cpu=0):
        self.workdir = workdir
        self.server_cpu = server_cpu
        self.client_cpu = client_cpu
        self.server_ip = SERVER_IP
        self.client_ip = HOST_IP
        self.cgroup = Cgroup()
        self.netns = Netns()

    def setup(self):
        os.makedirs(self.workdir, exist_ok=True)
        self.netns.create()
        self.cgroup.create(str(self.server_cpu))

    def teardown(self):
        self.cgroup.destroy()
        self.netns.destroy()

    def server_argv(self, argv, user=None):
        """`argv` wrapped so it starts in the server cgroup, inside the namespace, as `user`."""
        joins = " ".join(f"echo $$ > {f};" for f in self.cgroup.procs_files())
        wrapped = ["sh", "-c", joins + ' exec "$@"', "flrw-server", "ip", "netns", "exec", NETNS]
        if user:
            wrapped += ["runuser", "-u", user, "--"]
        return wrapped + list(argv)

    def ns_argv(self, argv, user=None):
        """`argv` run inside the namespace but outside the server cgroup (setup tools)."""
        wrapped = ["ip", "netns", "exec", NETNS]
        if user:
            wrapped += ["runuser", "-u", user, "--"]
        return wrapped + list(argv)

    def client_argv(self, argv):
        """`argv` pinned to the client CPU (root namespace)."""
        return ["taskset", "-c", str(self.client_cpu)] + list(argv)


def require(*tools):
    """Fails early, naming the missing tool and the package that provides it."""
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise RuntimeError(f"missing tools: {', '.join(missing)} (run scripts/setup.sh)")


def wait_port(host, port, timeout=60.0, netns=None):
    """Waits until a TCP port accepts connections (inside `netns` when given)."""
    import socket

    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{host}:{port} did not open within {timeout:.0f}s")


class Autogroup:
    """Switches kernel.sched_autogroup_enabled off for a CPU-hog fault and restores it:
    with autogroup, all hogs of one session share one scheduling entity and barely compete."""

    PATH = "/proc/sys/kernel/sched_autogroup_enabled"

    def __init__(self):
        self.saved = None

    def disable(self):
        try:
            with open(self.PATH) as f:
                self.saved = f.read().strip()
            with open(self.PATH, "w") as f:
                f.write("0")
        except OSError:
            self.saved = None

    def restore(self):
        if self.saved is not None:
            with open(self.PATH, "w") as f:
                f.write(self.saved)
            self.saved = None
