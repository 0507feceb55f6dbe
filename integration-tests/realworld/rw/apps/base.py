"""What an application under test provides to the harness.

An app owns its server (install check, data preparation, start/stop inside the sandbox),
its load generator (which writes every request into a LatencyLog), and its internal faults
(software bugs standing in for real ones, hitting a subset of its threads).
"""
import os

from ..faults import Fault


class InternalFault(Fault):
    """A bug injected through the application itself (class `internal`)."""

    klass = "internal"


class LoadHandle:
    """A running load generator; `stop()` ends it and waits for it."""

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
