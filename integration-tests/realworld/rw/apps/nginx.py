"""nginx (Debian `nginx-light`) serving static files: two single-threaded event-loop workers
and a master, the shape of the many servers that have no periodic thread at all. With no
client every process sleeps in epoll_wait/sigsuspend and makes no system call: an idle nginx
is as silent as a frozen one, which is what the idle cases check it is not taken for.

Load: the Apache cases' open-loop HTTP client (apache_load.py) on keep-alive connections,
static pages and a photo gallery only. No internal faults (nginx runs no application code)."""
import os
import signal
import subprocess

from ..env import sh, wait_port
from .apache import HttpLoad, write_gallery
from .base import App

NGINX = "/usr/sbin/nginx"
PORT = 8080
WORKERS = 2
RATE = 150.0
CONNS = 8
MIX = [("static", "/small.html", 40), ("static", "/page.html", 30), ("static", "/gallery/{n}.jpg", 30)]
STATIC_FILES = {"small.html": 1024, "page.html": 16 * 1024}
CONF = """\
daemon off;
master_process on;
worker_processes {workers};
pid {root}/run/nginx.pid;
error_log {root}/logs/error.log warn;
events {{ worker_connections 256; }}
http {{
    include /etc/nginx/mime.types;
    access_log {root}/logs/access.log combined buffer=64k flush=5s;
    keepalive_timeout 5s;
    sendfile on;
    client_body_temp_path {root}/run/body;
    proxy_temp_path {root}/run/proxy;
    fastcgi_temp_path {root}/run/fastcgi;
    uwsgi_temp_path {root}/run/uwsgi;
    scgi_temp_path {root}/run/scgi;
    server {{
        listen {ip}:{port};
        root {root}/htdocs;
    }}
}}
"""


class Nginx(App):
    name = "nginx"
    packages = ["nginx-light"]
    tools = [NGINX]
    comm = "nginx"
    cpu_cap_fraction = 0.05
    unsupported = {
        "disk": "static files stay in the page cache and nginx never syncs (access log buffered)",
        "mem_cap": "the workers' RSS is a few MiB; squeezing the gallery's page cache only turns photo hits "
                   "into fast disk reads",
    }

    def data_dir(self, env):
        return self._path("htdocs")

    def version(self):
        return sh(NGINX, "-v").stderr.strip()

    def prepare(self, env):
        for d in ("htdocs", "logs", "run"):
            os.makedirs(self._path(d), exist_ok=True)
        os.chmod(self.root, 0o755)
        for name, size in STATIC_FILES.items():
            with open(self._path("htdocs", name), "wb") as f:
                f.write(os.urandom(size))
        write_gallery(self._path("htdocs", "gallery"))
        with open(self._path("nginx.conf"), "w") as f:
            f.write(CONF.format(root=self.root, ip=env.server_ip, port=PORT, workers=WORKERS))

    def start(self, env):
        self.proc = subprocess.Popen(env.server_argv([NGINX, "-c", self._path("nginx.conf"), "-p", self.root]),
                                     stdout=subprocess.DEVNULL, stderr=open(self._path("logs", "server.stderr"), "a"))
        wait_port(env.server_ip, PORT)

    def stop(self, env):
        """SIGQUIT (graceful), then SIGKILL to whatever is left of the cgroup."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
        self.reap(env, self.proc)

    def start_load(self, env, log):
        return HttpLoad(env, self, log, self.load_seconds, mix=MIX, rate=RATE, conns=CONNS, port=PORT)

    def describe_load(self):
        mix = ", ".join(f"{p} {w}%" for _, p, w in MIX)
        return (f"apache_load.py (Python http.client, open-loop Poisson): {RATE:.0f} req/s over {CONNS} keep-alive "
                f"connections ({mix}); client on its own CPU via veth")
