"""MariaDB 10.11 (Debian) under sysbench: a thread per connection inside one `mariadbd`
process. Six sysbench clients each work on their own table (sbtest1..6) in oltp_read_write
transactions, so an internal fault on one or two tables hits a subset of the server's
connection threads while the others go on."""
import glob
import os
import subprocess
import time

from ..env import sh, wait_port
from ..session import PipedSession, SessionFault
from .base import App, LoadHandle

MARIADBD = "/usr/sbin/mariadbd"
PORT = 3306
DB = "sbtest"
LOAD_USER = "sbtest"
# Fault sessions log in as their own user so they can be cancelled by user name at stop.
FAULT_USER = "flrw_fault"
PASSWORD = "faultline"
TABLES = 6
TABLE_SIZE = 40_000
THREADS = 6
THINK_MS = (100, 240)
LUA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mariadb_oltp.lua")
# Small buffer pool (the 6 tables are ~60 MB) so memory and disk faults reach the queries;
# every commit fsyncs its redo log.
SERVER_OPTIONS = [
    "--innodb-buffer-pool-size=24M",
    "--innodb-flush-log-at-trx-commit=1",
    "--innodb-flush-method=fsync",
    "--max-connections=40",
    "--skip-name-resolve",
]


class Sysbench(LoadHandle):
    """sysbench running mariadb_oltp.lua; at stop its per-thread logs become LatencyLog
    entries (class = table name; a transaction begun but never ended is added with end None)."""

    def __init__(self, env, app, log, duration):
        self.log = log
        self.lat_dir = os.path.join(app.root, "sysbench-logs")
        os.makedirs(self.lat_dir, exist_ok=True)
        for f in glob.glob(os.path.join(self.lat_dir, "*")):
            os.unlink(f)
        argv = ["sysbench", LUA, "--db-driver=mysql", f"--mysql-host={env.server_ip}", f"--mysql-port={PORT}",
                f"--mysql-user={LOAD_USER}", f"--mysql-password={PASSWORD}", f"--mysql-db={DB}",
                f"--threads={THREADS}", f"--time={int(duration)}", "--events=0", "--rate=0",
                f"--tables={TABLES}", f"--table-size={TABLE_SIZE}", f"--think-min-ms={THINK_MS[0]}",
                f"--think-max-ms={THINK_MS[1]}", f"--lat-dir={self.lat_dir}", "run"]
        self.proc = subprocess.Popen(env.client_argv(argv), stdout=open(os.path.join(self.lat_dir, "sysbench.out"), "w"),
                                     stderr=subprocess.STDOUT)

    def processes(self):
        return [self.proc]

    def stop(self):
        """Waits for sysbench's own --time end (it covers the case), then reads its logs."""
        if self.paused and not self.halted:
            self.halt()
        try:
            self.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.returncode != 0 and not self.halted:
            print(f"   sysbench exited with {self.proc.returncode}: see {self.lat_dir}/sysbench.out", flush=True)
        for path in sorted(glob.glob(os.path.join(self.lat_dir, "t*.log"))):
            self._parse(path)

    def _parse(self, path):
        """B/E lines of one thread (see mariadb_oltp.lua) into the log."""
        begun = {}
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[0] == "B" and parts[1].isdigit():
                    begun[int(parts[1])] = parts[2]
                elif len(parts) == 5 and parts[0] == "E" and parts[1].isdigit() and parts[2].isdigit():
                    start = int(parts[1])
                    begun.pop(start, None)
                    self.log.add(start, int(parts[2]), parts[3] == "1", parts[4])
        for start, table in begun.items():
            self.log.add(start, None, True, table)


def admin_sql(app, sql, check=True):
    """Runs SQL as root over the server's Unix socket (unix_socket authentication)."""
    return sh("mariadb", "--no-defaults", "-S", app.socket(), "-u", "root", "-N", "-B", "-e", sql, check=check,
              quiet=not check)


class LockTables(SessionFault):
    subsystem = "locking"
    description = ("internal: another session holds LOCK TABLES sbtest1 WRITE for the whole fault phase: the sysbench "
                   "client bound to sbtest1 blocks on the metadata lock, the other 5 go on (a lock held too long)")
    sql = "LOCK TABLES sbtest1 WRITE;"


class RowLock(SessionFault):
    subsystem = "locking"
    description = ("internal: another session opens a transaction and takes InnoDB row locks on every row of sbtest2 "
                   "and sbtest3 (SELECT ... FOR UPDATE) and keeps it open: the 2 of 6 clients updating those tables "
                   "wait on row locks (innodb_lock_wait_timeout 50 s; a client transaction caught mid-way may be "
                   "rolled back as a deadlock victim and retried), the other 4 go on")
    sql = ("BEGIN; SELECT COUNT(*) FROM (SELECT id FROM sbtest2 FOR UPDATE) a; "
           "SELECT COUNT(*) FROM (SELECT id FROM sbtest3 FOR UPDATE) b;")


class RunawayQuery(SessionFault):
    subsystem = "cpu"
    description = ("internal: one extra connection runs a runaway CPU-bound query (SELECT BENCHMARK(...)) that spins "
                   "in one server thread for the whole fault phase, cancelled with KILL QUERY at the end")
    sql = "SELECT BENCHMARK(1000000000000, MD5('faultline'));"


class MariaDB(App):
    name = "mariadb"
    packages = ["mariadb-server", "mariadb-client", "sysbench"]
    tools = ["mariadb", "mariadb-install-db", "mariadb-admin", "sysbench"]
    comm = "mariadbd"
    cpu_cap_fraction = 0.05
    mem_cap_below_bytes = 8 * 2**20

    FAULT_SESSION_GOODBYE = "ROLLBACK;\nUNLOCK TABLES;\nquit\n"

    def fault_session(self, env):
        """A `mariadb` client from the client address as the fault user."""
        argv = ["mariadb", "--no-defaults", "-h", env.server_ip, "-P", str(PORT), "-u", FAULT_USER,
                f"-p{PASSWORD}", "-n", "-N", "-B", DB]
        return PipedSession(env.client_argv(argv))

    def cancel_fault_session(self, env):
        admin_sql(self, f"KILL QUERY USER {FAULT_USER}", check=False)

    def socket(self):
        """The admin path: a Unix socket under the app's root, not /run (no system service)."""
        return os.path.join(self.root, "mariadbd.sock")

    def version(self):
        return sh(MARIADBD, "--version").stdout.strip()

    def prepare(self, env):
        """Datadir and sysbench tables once; a marker file makes later runs reuse them."""
        if not os.path.exists(MARIADBD):
            raise RuntimeError(f"{MARIADBD} missing (install the mariadb-server package)")
        data = self.data_dir(env)
        os.makedirs(self.root, exist_ok=True)
        sh("chown", "mysql:mysql", self.root)
        if not os.path.isdir(os.path.join(data, "mysql")):
            sh("mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=mysql", "--skip-test-db")
        marker = os.path.join(self.root, "sbtest-prepared")
        if os.path.exists(marker):
            return
        self.start(env)
        try:
            users = "".join(
                f"CREATE USER IF NOT EXISTS '{u}'@'{env.client_ip}' IDENTIFIED BY '{PASSWORD}'; "
                f"GRANT ALL ON {DB}.* TO '{u}'@'{env.client_ip}'; "
                for u in (LOAD_USER, FAULT_USER))
            admin_sql(self, f"DROP DATABASE IF EXISTS {DB}; CREATE DATABASE {DB}; {users}")
            sh("sysbench", "oltp_read_write", "--db-driver=mysql", f"--mysql-host={env.server_ip}", f"--mysql-port={PORT}",
               f"--mysql-user={LOAD_USER}", f"--mysql-password={PASSWORD}", f"--mysql-db={DB}",
               f"--tables={TABLES}", f"--table-size={TABLE_SIZE}", f"--threads={TABLES}", "prepare")
        finally:
            self.stop(env)
        with open(marker, "w") as f:
            f.write(f"{TABLES} tables x {TABLE_SIZE} rows\n")

    def start(self, env):
        argv = [MARIADBD, "--no-defaults", f"--datadir={self.data_dir(env)}", f"--socket={self.socket()}",
                f"--pid-file={os.path.join(self.root, 'mariadbd.pid')}", f"--bind-address={env.server_ip}",
                f"--port={PORT}", f"--log-error={os.path.join(self.root, 'server.log')}"] + SERVER_OPTIONS
        self.proc = subprocess.Popen(env.server_argv(argv, user="mysql"), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        wait_port(env.server_ip, PORT)
        for _ in range(100):
            if admin_sql(self, "SELECT 1", check=False).returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError(f"mariadbd did not accept queries (see {self.root}/server.log)")

    def stop(self, env):
        sh("mariadb-admin", "--no-defaults", "-S", self.socket(), "-u", "root", "shutdown", check=False, quiet=True)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def start_load(self, env, log):
        return Sysbench(env, self, log, self.load_seconds)

    def internal_faults(self):
        return {"lock_tables": LockTables, "row_lock": RowLock, "runaway_query": RunawayQuery}

    def describe_load(self):
        return (f"sysbench 1.0.20 with mariadb_oltp.lua (oltp_read_write transactions, {TABLES} tables x {TABLE_SIZE} "
                f"rows, buffer pool 24M, flush_log_at_trx_commit=1, flush_method=fsync), {THREADS} client threads, "
                f"each bound to its own table, closed loop with {THINK_MS[0]}-{THINK_MS[1]} ms think time "
                "(~34 tx/s, 18 statements + BEGIN/COMMIT per tx), client on its own CPU via veth")
