"""What an application under test provides to the harness.

An app owns its server (install check, data preparation, start/stop inside the sandbox),
its load generator (which writes every request into a LatencyLog), and its internal faults
(software bugs standing in for real ones, hitting a subset of its threads).
"""
import os
import signal
import subprocess

from ..faults import Fault


class InternalFault(Fault):
    """A bug injected through the application itself (class `internal`)."""

    klass = "internal"


class LoadHandle:
    """A running load generator; `stop()` ends it and waits for it (at the case's end) and puts
    its requests into the LatencyLog.

    The idle cases (`rw/faults.py`) end or pause the clients at the fault phase's start:
    `halt()` ends them now (their connections close), `pause()` stops them with SIGSTOP (their
    connections stay open, nothing is sent). `stop()` after either still collects the requests
    logged so far; `halt()` after `pause()` kills the paused clients (no catch-up burst)."""

    halted = False
    paused = False

    def processes(self):
        """The client processes (subprocess.Popen)."""
        return []

    def halt(self):
        """Ends the clients now: SIGTERM (SIGKILL when paused, or after 10 s) and waits."""
        for p in self.processes():
            if p.poll() is None:
                if self.paused:
                    p.kill()
                else:
                    p.terminate()
        for p in self.processes():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.halted = True

    def pause(self):
        """SIGSTOP to every client process: connections open, no request sent."""
        for p in self.processes():
            if p.poll() is None:
                os.kill(p.pid, signal.SIGSTOP)
        self.paused = True

    def stop(self):
        raise NotImplementedError


class App:
    #: short name used in case ids (`postgres_cpu_cap`)
    name = ""
    #: Debian packages the app needs (scripts/setup.sh installs them)
    packages = []
    #: executables that must exist
    tools = []
    #: the server's process name (`comm`) in traces: the faultline target
    comm = ""
    #: fraction of one CPU for the cpu_cap fault: small enough to hurt this server's load
    cpu_cap_fraction = 0.1
    #: how far below RSS + mapped files the mem_cap fault sets the limit
    mem_cap_below_bytes = 4 * 2**20
    #: external faults that cannot hurt this app's workload, with the reason (skipped)
    unsupported = {}

    def __init__(self, root):
        #: persistent directory for this app's data (survives between cases)
        self.root = os.path.join(root, self.name)

    def _path(self, *parts):
        """A path under this app's persistent directory."""
        return os.path.join(self.root, *parts)

    def data_dir(self, env):
        """Directory on the disk the server writes to (the disk fault writes next to it)."""
        return os.path.join(self.root, "data")

    def version(self):
        raise NotImplementedError

    def prepare(self, env):
        """Once per run, before any case: create data, load tables (not traced)."""
        raise NotImplementedError

    def start(self, env):
        """Start the server with `env.server_argv(...)` (server cgroup, namespace, CPU) and
        return when it serves on env.server_ip."""
        raise NotImplementedError

    def stop(self, env):
        raise NotImplementedError

    @staticmethod
    def reap(env, proc, timeout=15):
        """After a graceful stop was asked: waits for the server's main process (SIGKILL past
        `timeout` s), then SIGKILLs whatever is left in the server cgroup."""
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for pid in env.cgroup.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def start_load(self, env, log):
        """Start the load generator (client CPU, `env.client_argv`) at a moderate, bounded rate;
        every request goes into `log` (LatencyLog) with its class. Returns a LoadHandle."""
        raise NotImplementedError

    def internal_faults(self):
        """{fault name: InternalFault subclass} for this app."""
        return {}

    def describe_load(self):
        """One line for truth.json: tool, version, rate, clients."""
        return ""
