#!/usr/bin/env python3
"""HTTP client of the Apache cases, run as its own process on the client CPU.

`load`: open-loop Poisson arrivals at a fixed total rate, served by a few keep-alive
connections (stdlib http.client). A request's start is its scheduled arrival, so time spent
queued behind a stuck connection counts (no coordinated omission). Every request is logged
when due (`B id start_ns class`) and when answered (`E id end_ns ok`): requests that never
finish stay visible as open ones.

`fault`: sends `count` requests to one path, each on its own connection, and logs them the
same way; the harness ends it after releasing the fault.

Clock: CLOCK_MONOTONIC ns, the clock of the perf trace.
"""
import argparse
import http.client
import queue
import random
import signal
import sys
import threading
import time

#: arrivals waiting for a free connection; beyond it a request is counted failed at once
QUEUE_CAP = 20000
#: after SIGTERM, how long requests in flight may still finish (only hung ones stay open)
GRACE_SECONDS = 3.0


def now_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


class Log:
    """Line-buffered request log shared by the threads (one line per event survives a kill)."""

    def __init__(self, path):
        self._f = open(path, "w", buffering=1)
        self._lock = threading.Lock()
        self._open = 0

    def begin(self, rid, start_ns, klass):
        with self._lock:
            self._open += 1
            self._f.write(f"B {rid} {start_ns} {klass}\n")

    def end(self, rid, end_ns, ok):
        with self._lock:
            self._open -= 1
            self._f.write(f"E {rid} {end_ns} {1 if ok else 0}\n")

    def open_requests(self):
        with self._lock:
            return self._open


class Connection:
    """One keep-alive connection that reconnects when the server closes it."""

    def __init__(self, host, port, timeout):
        self.host, self.port, self.timeout = host, port, timeout
        self.conn = None

    def _close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def get(self, path):
        """True on a 200 answer. A reused connection the server closed meanwhile (keep-alive
        timeout, MaxKeepAliveRequests) is retried once on a fresh one, as browsers do."""
        for attempt in range(2):
            reused = self.conn is not None
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.request("GET", path)
                resp = self.conn.getresponse()
                resp.read()
                if resp.will_close:
                    self._close()
                return resp.status == 200
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self._close()
                if not reused or attempt == 1:
                    return False
            except (OSError, http.client.HTTPException):
                self._close()
                return False
        return False


class Flag:
    """Set from the SIGTERM handler: a plain attribute, because a signal handler that takes a
    lock the interrupted main thread holds (threading.Event) can deadlock."""

    def __init__(self):
        self._set = False

    def set(self):
        self._set = True

    def is_set(self):
        return self._set


def parse_mix(text):
    """`class:path:weight,...` → [(class, path, weight)]."""
    mix = []
    for item in text.split(","):
        klass, path, weight = item.split(":")
        mix.append((klass, path, float(weight)))
    return mix


def run_load(args, log, stopping):
    """Schedules arrivals for `duration` seconds or until `stopping`; connection threads serve
    them in order."""
    mix = parse_mix(args.mix)
    weights = [w for _, _, w in mix]
    rng = random.Random(args.seed)
    todo = queue.Queue(maxsize=QUEUE_CAP)

    def serve():
        conn = Connection(args.host, args.port, args.timeout)
        while True:
            rid, path = todo.get()
            ok = conn.get(path)
            log.end(rid, now_ns(), ok)

    for _ in range(args.conns):
        threading.Thread(target=serve, daemon=True).start()
    start = now_ns()
    due = start
    end = start + int(args.duration * 1e9)
    rid = 0
    while due < end:
        due += int(rng.expovariate(args.rate) * 1e9)
        wait = (due - now_ns()) / 1e9
        if wait > 0:
            time.sleep(wait)
        if stopping.is_set():
            return
        klass, path, _ = rng.choices(mix, weights)[0]
        path = path.replace("{n}", str(rng.randrange(args.files)))
        log.begin(rid, due, klass)
        try:
            todo.put_nowait((rid, path))
        except queue.Full:
            log.end(rid, now_ns(), False)
        rid += 1


def run_fault(args, log, stopping):
    """`count` concurrent requests to `path`, each on its own connection; waits for them or
    for `stopping`."""

    def one(rid):
        log.begin(rid, now_ns(), "fault")
        ok = Connection(args.host, args.port, args.timeout).get(args.path)
        log.end(rid, now_ns(), ok)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(args.count)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads) and not stopping.is_set():
        time.sleep(0.1)


def drain(log, grace):
    """Lets the requests in flight finish (up to `grace` seconds): a request cut off by the
    harness stopping the client would otherwise look hung."""
    deadline = time.monotonic() + grace
    while log.open_requests() > 0 and time.monotonic() < deadline:
        time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["load", "fault"])
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--out", required=True)
    ap.add_argument("--timeout", type=float, default=300.0, help="per-request socket timeout (s)")
    ap.add_argument("--rate", type=float, default=150.0, help="load: total requests/s")
    ap.add_argument("--conns", type=int, default=8, help="load: keep-alive connections")
    ap.add_argument("--duration", type=float, default=60.0, help="load: seconds of arrivals")
    ap.add_argument("--mix", default="", help="load: class:path:weight,...")
    ap.add_argument("--files", type=int, default=1, help="load: `{n}` in a path becomes a random number below this")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--path", default="", help="fault: path to request")
    ap.add_argument("--count", type=int, default=1, help="fault: concurrent requests")
    args = ap.parse_args()
    # SIGTERM from the harness: stop sending, let requests in flight finish, then leave.
    stopping = Flag()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    log = Log(args.out)
    if args.mode == "load":
        run_load(args, log, stopping)
        while not stopping.is_set():
            time.sleep(0.1)
    else:
        run_fault(args, log, stopping)
    drain(log, GRACE_SECONDS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
