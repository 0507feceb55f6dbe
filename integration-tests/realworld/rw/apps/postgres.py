"""PostgreSQL 15 (Debian) under pgbench: a process per connection, so each backend is one
"thread" for faultline. Three client classes run side by side (TPC-B-like writes, select-only
reads, and a class that takes an advisory lock per transaction), so internal faults can hit
a subset of the backends."""
import glob
import os
import subprocess
import time

from ..env import mono_ns, sh, wait_port
from ..session import PipedSession, SessionFault
from .base import App, LoadHandle

BIN = "/usr/lib/postgresql/15/bin"
PORT = 5432
SCALE = 10
ADV_SCRIPT = """\\set aid random(1, 100000 * :scale)
BEGIN;
SELECT pg_advisory_xact_lock(42);
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
END;
"""
# (class, pgbench arguments, clients, rate tx/s)
CLASSES = [
    ("tpcb", ["-b", "tpcb-like"], 4, 30),
    ("select", ["-b", "select-only"], 4, 60),
    ("adv", ["-f", "{adv}"], 2, 20),
]


class Pgbench(LoadHandle):
    def __init__(self, env, app, log, duration):
        self.log = log
        self.procs = []
        self.prefixes = []
        logdir = os.path.join(app.root, "pgbench-logs")
        os.makedirs(logdir, exist_ok=True)
        for f in glob.glob(os.path.join(logdir, "*")):
            os.unlink(f)
        adv = os.path.join(app.root, "adv.sql")
        with open(adv, "w") as f:
            f.write(ADV_SCRIPT)
        # pgbench stamps its log with wall-clock time; the trace uses CLOCK_MONOTONIC.
        self.offset_ns = time.time_ns() - mono_ns()
        for klass, args, clients, rate in CLASSES:
            prefix = os.path.join(logdir, klass)
            args = [a.format(adv=adv) for a in args]
            argv = [f"{BIN}/pgbench", "-h", env.server_ip, "-p", str(PORT), "-U", "postgres", "-n",
                    "-c", str(clients), "-j", "1", "-R", str(rate), "-T", str(int(duration)), "-s", str(SCALE),
                    "-l", f"--log-prefix={prefix}"] + args + ["bench"]
            self.procs.append(subprocess.Popen(env.client_argv(argv), stdout=subprocess.DEVNULL,
                                               stderr=open(prefix + ".stderr", "w")))
            self.prefixes.append((klass, prefix))

    def processes(self):
        return self.procs

    def stop(self):
        if self.paused and not self.halted:
            self.halt()
        for p in self.procs:
            try:
                p.wait(timeout=90)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for klass, prefix in self.prefixes:
            for path in glob.glob(prefix + ".*"):
                if path.endswith(".stderr"):
                    continue
                with open(path) as f:
                    for line in f:
                        # pgbench buffers its log: a client killed by an idle case (halt)
                        # leaves its last buffer flush cut mid-line, and loses what it held.
                        if not line.endswith("\n"):
                            continue
                        parts = line.split()
                        # client_id transaction_no time script_no time_epoch time_us [schedule_lag]
                        if len(parts) < 6 or not parts[2].isdigit():
                            continue
                        latency_us = int(parts[2])
                        end_ns = int(parts[4]) * 10**9 + int(parts[5]) * 1000 - self.offset_ns
                        # With -R the latency is counted from the scheduled start (lag included).
                        start_ns = end_ns - latency_us * 1000
                        self.log.add(start_ns, end_ns, True, klass)


class LockTable(SessionFault):
    subsystem = "locking"
    description = "another session holds LOCK TABLE pgbench_tellers (ACCESS EXCLUSIVE): the TPC-B clients' backends block, select-only and advisory ones go on"
    sql = "BEGIN; LOCK TABLE pgbench_tellers IN ACCESS EXCLUSIVE MODE;"


class AdvisoryHang(SessionFault):
    subsystem = "locking"
    description = "another session holds advisory lock 42 forever: the backends of the 'adv' class hang in their transactions"
    sql = "SELECT pg_advisory_lock(42);"


class RunawayQuery(SessionFault):
    subsystem = "cpu"
    description = "a runaway CPU-bound query in one backend (generate_series count over 10^10 rows)"
    sql = "SELECT count(*) FROM generate_series(1, 10000000000);"


class Postgres(App):
    name = "postgres"
    packages = ["postgresql"]
    tools = ["psql"]
    comm = "postgres"
    cpu_cap_fraction = 0.05
    mem_cap_below_bytes = 8 * 2**20

    def version(self):
        return sh(f"{BIN}/postgres", "--version").stdout.strip()

    def _conf(self):
        return os.path.join(self.data_dir(None), "postgresql.auto.conf")

    def prepare(self, env):
        data = self.data_dir(env)
        os.makedirs(self.root, exist_ok=True)
        sh("chown", "postgres:postgres", self.root)
        if not os.path.exists(os.path.join(data, "PG_VERSION")):
            sh("runuser", "-u", "postgres", "--", f"{BIN}/initdb", "-D", data, "--auth=trust", "-U", "postgres")
            with open(os.path.join(data, "pg_hba.conf"), "a") as f:
                f.write("host all all 10.231.7.0/24 trust\n")
            with open(self._conf(), "a") as f:
                f.write(
                    f"listen_addresses = '{env.server_ip}'\nport = {PORT}\nunix_socket_directories = '{self.root}'\n"
                    "shared_buffers = 32MB\nmax_connections = 40\nsynchronous_commit = on\n"
                )
            sh("chown", "-R", "postgres:postgres", self.root)
            self.start(env)
            sh("psql", "-h", env.server_ip, "-U", "postgres", "-q", "-c", "CREATE DATABASE bench")
            sh(f"{BIN}/pgbench", "-h", env.server_ip, "-U", "postgres", "-i", "-q", "-s", str(SCALE), "bench")
            self.stop(env)

    def start(self, env):
        self.proc = subprocess.Popen(env.server_argv([f"{BIN}/postgres", "-D", self.data_dir(env)], user="postgres"),
                                     stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.root, "server.log"), "a"))
        wait_port(env.server_ip, PORT)
        for _ in range(100):
            if sh("psql", "-h", env.server_ip, "-U", "postgres", "-q", "-c", "SELECT 1", "postgres", check=False, quiet=True).returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError("postgres did not accept queries")

    def stop(self, env):
        sh("runuser", "-u", "postgres", "--", f"{BIN}/pg_ctl", "stop", "-D", self.data_dir(env), "-m", "fast", "-w",
           check=False, quiet=True)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def start_load(self, env, log):
        return Pgbench(env, self, log, self.load_seconds)

    FAULT_SESSION_GOODBYE = "ROLLBACK;\n\\q\n"

    def fault_session(self, env):
        """psql from the client address, tagged so `cancel_fault_session` finds its backend."""
        argv = env.client_argv(["psql", "-h", env.server_ip, "-p", str(PORT), "-U", "postgres", "-q", "bench"])
        return PipedSession(argv, dict(os.environ, PGAPPNAME="flrw_fault"))

    def cancel_fault_session(self, env):
        sh("psql", "-h", env.server_ip, "-p", str(PORT), "-U", "postgres", "-q", "-c",
           "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'flrw_fault'",
           "bench", check=False, quiet=True)

    def internal_faults(self):
        return {"lock_table": LockTable, "adv_lock_hang": AdvisoryHang, "runaway_query": RunawayQuery}

    def describe_load(self):
        parts = [f"{c} clients {k} at {r} tx/s" for k, _, c, r in CLASSES]
        return f"pgbench 15 (scale {SCALE}, open loop -R, per-transaction log): " + "; ".join(parts) + "; client on its own CPU via veth"
