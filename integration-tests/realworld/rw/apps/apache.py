"""Apache httpd 2.4 (Debian) with mpm_worker: a fixed pool of 2 children x 16 worker threads,
so faultline sees many threads of one server. Two small pages, a photo gallery and a mod_lua
page (apache_handlers.lua) are loaded by an open-loop HTTP client (apache_load.py) on keep-alive
connections. Internal faults are requests to buggy endpoints that tie up a few worker
threads: hung on a backend, spinning in a busy retry loop, or in a runaway CPU loop."""
import os
import random
import signal
import subprocess
import sys
import time

from ..env import sh, wait_port
from .base import App, InternalFault, LoadHandle

APACHE = "/usr/sbin/apache2"
MODULES = "/usr/lib/apache2/modules"
PORT = 8080
HERE = os.path.dirname(os.path.abspath(__file__))
LOAD_SCRIPT = os.path.join(HERE, "apache_load.py")
HANDLERS = os.path.join(HERE, "apache_handlers.lua")
THREADS_PER_CHILD = 16
CHILDREN = 2
WORKERS = THREADS_PER_CHILD * CHILDREN
RATE = 150.0
CONNS = 8
# A photo gallery (64 MiB, uniformly requested) that the server reads from disk itself after
# start, so its page cache is charged to the server's cgroup (what a memory limit squeezes).
GALLERY_FILES = 512
GALLERY_FILE_BYTES = 128 * 1024
# (class, path, weight): two thirds static files (`{n}`: a random gallery photo), one third dynamic pages
MIX = [("static", "/small.html", 25), ("static", "/page.html", 20), ("static", "/gallery/{n}.jpg", 20), ("app", "/app", 35)]
# Order records the dynamic page ranks per request: a few ms of Lua CPU time per page.
APP_ORDERS = 2000
STATIC_FILES = {"small.html": 1024, "page.html": 16 * 1024}
CONF = """\
ServerRoot "{root}"
ServerName flrw-apache
DefaultRuntimeDir "{root}/run"
PidFile "{root}/run/apache2.pid"
Listen {ip}:{port}
LoadModule mpm_worker_module {mods}/mod_mpm_worker.so
LoadModule authz_core_module {mods}/mod_authz_core.so
LoadModule mime_module {mods}/mod_mime.so
LoadModule lua_module {mods}/mod_lua.so
User www-data
Group www-data
# A fixed pool: no child is spawned or reaped during a case.
StartServers {children}
ServerLimit {children}
ThreadLimit {threads}
ThreadsPerChild {threads}
MaxRequestWorkers {workers}
MinSpareThreads 1
MaxSpareThreads {workers}
MaxConnectionsPerChild 0
KeepAlive On
MaxKeepAliveRequests 100
KeepAliveTimeout 5
GracefulShutdownTimeout 3
ErrorLog "{root}/logs/error.log"
LogLevel warn
LogFormat "%h %l %u %t \\"%r\\" %>s %b %D" timed
CustomLog "{root}/logs/access.log" timed
BufferedLogs On
TypesConfig /etc/mime.types
DocumentRoot "{root}/htdocs"
<Directory "{root}/htdocs">
    Require all granted
</Directory>
LuaScope thread
LuaMapHandler ^/app$ "{root}/handlers.lua" app
LuaMapHandler ^/hang$ "{root}/handlers.lua" hang
LuaMapHandler ^/busy_retry$ "{root}/handlers.lua" busy_retry
LuaMapHandler ^/runaway$ "{root}/handlers.lua" runaway
"""
TEMPLATE = "<html><head><title>orders</title></head><body><h1>Orders</h1><table>{{rows}}</table></body></html>\n"


class HttpLoad(LoadHandle):
    """The load client process; at stop its request log goes into the LatencyLog."""

    def __init__(self, env, app, log, duration, mix=MIX, rate=RATE, conns=CONNS, port=PORT):
        self.log = log
        self.path = os.path.join(app.root, "load.log")
        mix = ",".join(f"{k}:{p}:{w}" for k, p, w in mix)
        argv = [sys.executable, LOAD_SCRIPT, "load", "--host", env.server_ip, "--port", str(port), "--out", self.path,
                "--rate", str(rate), "--conns", str(conns), "--duration", str(duration), "--mix", mix,
                "--files", str(GALLERY_FILES)]
        self.proc = subprocess.Popen(env.client_argv(argv), stdout=subprocess.DEVNULL,
                                     stderr=open(self.path + ".stderr", "w"))

    def processes(self):
        return [self.proc]

    def stop(self):
        if self.paused and not self.halted:
            self.halt()
        stop_client(self.proc)
        for start_ns, end_ns, ok, klass in read_requests(self.path):
            if end_ns is None:
                self.log.begin(start_ns, klass)
            else:
                self.log.add(start_ns, end_ns, ok, klass)


def write_gallery(gallery):
    """Incompressible photo stand-ins in directory `gallery`, written once (kept between runs)."""
    os.makedirs(gallery, exist_ok=True)
    for i in range(GALLERY_FILES):
        path = os.path.join(gallery, f"{i}.jpg")
        if not os.path.exists(path) or os.path.getsize(path) != GALLERY_FILE_BYTES:
            with open(path, "wb") as f:
                f.write(os.urandom(GALLERY_FILE_BYTES))
                os.fsync(f.fileno())


def stop_client(proc):
    """SIGTERM, then SIGKILL if the client does not leave within 10 s."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def read_requests(path):
    """[(start_ns, end_ns or None, ok, class)] from an apache_load.py log."""
    begun, ended = {}, {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) != 4 or not parts[2].isdigit():
                continue
            if parts[0] == "B":
                begun[parts[1]] = (int(parts[2]), parts[3])
            elif parts[0] == "E":
                ended[parts[1]] = (int(parts[2]), parts[3] == "1")
    out = []
    for rid, (start_ns, klass) in begun.items():
        end_ns, ok = ended.get(rid, (None, True))
        out.append((start_ns, end_ns, ok, klass))
    return out


class EndpointFault(InternalFault):
    """`count` requests to a buggy endpoint, on their own connections, sent at the fault start;
    each ties up one worker thread until `stop` releases it through a file in the state dir."""

    path = ""
    count = 0
    release_file = ""

    def start(self, env, app):
        self.log_path = os.path.join(app.root, f"fault{self.path.replace('/', '-')}.log")
        argv = [sys.executable, LOAD_SCRIPT, "fault", "--host", env.server_ip, "--port", str(PORT),
                "--out", self.log_path, "--path", self.path, "--count", str(self.count)]
        self.proc = subprocess.Popen(env.client_argv(argv), stdout=subprocess.DEVNULL,
                                     stderr=open(self.log_path + ".stderr", "w"))
        self.details = {"path": self.path, "requests": self.count, "workers": WORKERS, "load_connections": CONNS}

    def stop(self, env, app):
        app.release(self.release_file)
        self.after_release(app)
        # The released handlers answer within a second; the ones still queued are cut off.
        for _ in range(50):
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        stop_client(self.proc)
        reqs = read_requests(self.log_path)
        self.details["answered_after_release"] = sum(1 for _, e, ok, _ in reqs if e is not None and ok)
        self.details["sent"] = len(reqs)

    def after_release(self, app):
        pass


class Hang(EndpointFault):
    subsystem = "threads"
    path = "/hang"
    count = WORKERS - 4
    release_file = "hang.release"
    description = (f"{count} requests to /hang, whose handler waits on a backend FIFO nobody writes: {count} of the "
                   f"{WORKERS} worker threads hang in open(); the client's keep-alive connections, as they turn over, "
                   "queue for the few workers left")

    def after_release(self, app):
        app.answer_fifo()


class BusyRetry(EndpointFault):
    subsystem = "cpu"
    path = "/busy_retry"
    count = 6
    release_file = "spool.ready"
    description = (f"{count} requests to /busy_retry, whose handler retries opening a missing spool file with no "
                   f"back-off (failing openat() in a tight loop, like Apache bug 37680): {count} worker threads spin "
                   "on the server's CPU")


class Runaway(EndpointFault):
    subsystem = "cpu"
    path = "/runaway"
    count = 6
    release_file = "runaway.stop"
    description = (f"{count} requests to /runaway, whose handler spins in a pure-CPU Lua loop (a runaway computation): "
                   f"{count} worker threads busy on the server's CPU")


class Apache(App):
    name = "apache"
    packages = ["apache2", "apache2-bin"]
    tools = [APACHE]
    comm = "apache2"
    cpu_cap_fraction = 0.08
    mem_cap_below_bytes = 4 * 2**20
    unsupported = {
        "disk": "every file the server reads stays in the page cache and it never syncs (access log buffered, "
                "mod_lua has no fsync): two co-located dd writers left p99 at 8.2 -> 9.3 ms, throughput unchanged",
        "mem_cap": "without swap the limit cannot go below the anonymous RSS (Lua states, ~51 MiB); squeezing the "
                   "page cache of the 64 MiB gallery to ~10 MiB only turns photo hits into fast disk reads: "
                   "p99 22 -> 15 ms, throughput 152 -> 147 req/s",
    }

    def data_dir(self, env):
        return self._path("htdocs")

    def version(self):
        return sh(APACHE, "-v").stdout.splitlines()[0].strip()

    def prepare(self, env):
        for d in ("htdocs", "logs", "run", "state"):
            os.makedirs(self._path(d), exist_ok=True)
        os.chmod(self.root, 0o755)
        os.chmod(self._path("state"), 0o755)
        rng = random.Random(7)
        for name, size in STATIC_FILES.items():
            with open(self._path("htdocs", name), "wb") as f:
                f.write(bytes(rng.getrandbits(8) for _ in range(size)))
        self._write_gallery()
        with open(self._path("htdocs", "template.html"), "w") as f:
            f.write(TEMPLATE)
        with open(HANDLERS) as f:
            lua = f.read().replace("@STATE@", self._path("state")).replace("@DOCROOT@", self._path("htdocs"))
            lua = lua.replace("@ORDERS@", str(APP_ORDERS))
        with open(self._path("handlers.lua"), "w") as f:
            f.write(lua)
        with open(self._path("httpd.conf"), "w") as f:
            f.write(CONF.format(root=self.root, ip=env.server_ip, port=PORT, mods=MODULES, children=CHILDREN,
                                threads=THREADS_PER_CHILD, workers=WORKERS))
        sh(APACHE, "-t", "-f", self._path("httpd.conf"))
        for log in ("access.log", "error.log"):
            if os.path.exists(self._path("logs", log)):
                os.unlink(self._path("logs", log))

    def _write_gallery(self):
        write_gallery(self._path("htdocs", "gallery"))

    def _drop_gallery_cache(self):
        """Evicts the photos from the page cache, so the server reads them itself after start
        and their cache pages are charged to its cgroup (what the mem_cap fault squeezes)."""
        gallery = self._path("htdocs", "gallery")
        for name in os.listdir(gallery):
            fd = os.open(os.path.join(gallery, name), os.O_RDONLY)
            try:
                os.fdatasync(fd)  # dirty pages are not dropped
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)

    def _reset_state(self):
        """Fresh fault state for a case: no release files, an unwritten backend FIFO."""
        state = self._path("state")
        for name in os.listdir(state):
            os.unlink(os.path.join(state, name))
        os.mkfifo(os.path.join(state, "backend.fifo"), 0o644)

    def release(self, name):
        """Creates the file a fault handler waits for or checks."""
        with open(self._path("state", name), "w") as f:
            f.write("release\n")
        os.chmod(self._path("state", name), 0o644)

    def answer_fifo(self):
        """Opens the backend FIFO as a writer (O_RDWR never blocks) so the handlers blocked in
        open() go on, keeps it open a moment for late readers, then closes it: they read EOF."""
        fd = os.open(self._path("state", "backend.fifo"), os.O_RDWR | os.O_NONBLOCK)
        try:
            os.write(fd, b"done\n")
            time.sleep(1.0)
        finally:
            os.close(fd)

    def start(self, env):
        self._reset_state()
        self._drop_gallery_cache()
        self.proc = subprocess.Popen(env.server_argv([APACHE, "-f", self._path("httpd.conf"), "-DFOREGROUND"]),
                                     stdout=subprocess.DEVNULL, stderr=open(self._path("logs", "server.stderr"), "a"))
        wait_port(env.server_ip, PORT)
        # The pool is complete when both children run: pids taken after warm-up must be final.
        for _ in range(100):
            if len(env.cgroup.pids()) >= 1 + CHILDREN:
                return
            time.sleep(0.1)
        raise RuntimeError(f"apache2 did not start {CHILDREN} children (see {self._path('logs', 'error.log')})")

    def stop(self, env):
        """graceful-stop (SIGWINCH to the parent), then SIGKILL after GracefulShutdownTimeout."""
        if self.proc.poll() is None:
            try:
                with open(self._path("run", "apache2.pid")) as f:
                    os.kill(int(f.read().strip()), signal.SIGWINCH)
            except (OSError, ValueError):
                self.proc.terminate()
        self.reap(env, self.proc)

    def start_load(self, env, log):
        return HttpLoad(env, self, log, self.load_seconds)

    def internal_faults(self):
        return {"hang": Hang, "busy_retry": BusyRetry, "runaway": Runaway}

    def describe_load(self):
        mix = ", ".join(f"{p} {w}%" for _, p, w in MIX)
        return (f"apache_load.py (Python http.client, open-loop Poisson): {RATE:.0f} req/s over {CONNS} keep-alive "
                f"connections ({mix}; {GALLERY_FILES} gallery photos of {GALLERY_FILE_BYTES >> 10} KiB); "
                "client on its own CPU via veth")
