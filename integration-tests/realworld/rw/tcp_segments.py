"""The server namespace's TCP segment counters, sampled once a second beside the perf
recording and written as `faultline:tcp_segments` pseudo-tracepoint lines (`tcp.txt`), and
their merge into a `perf script` stream in time order.

Why: packet loss shows as retransmissions even when no call slows, and the syscall trace
alone cannot see them. `/proc/<server pid>/net/snmp` reads the server's own namespace.
"""
import heapq
import re
import threading

from .env import mono_ns

FILE = "tcp.txt"
PERIOD_S = 1.0
# The timestamp token "seconds.nanoseconds:" follows "pid/tid": searched, not split, so a
# comm with a space in it does not shift it.
TIMESTAMP = re.compile(rb"\s\d+/\d+\s+(\d+)\.(\d+):")


def read_counters(pid):
    """(OutSegs, RetransSegs) of the namespace `pid` lives in, or None when unreadable."""
    try:
        with open(f"/proc/{pid}/net/snmp") as f:
            tcp = [line.split()[1:] for line in f if line.startswith("Tcp:")]
        names, values = tcp[0], tcp[1]
        return int(values[names.index("OutSegs")]), int(values[names.index("RetransSegs")])
    except (OSError, IndexError, ValueError):
        return None


def format_line(comm, pid, ts_ns, sent, retransmitted):
    """One sample in `perf script` layout (comm right-aligned in 16 columns as perf prints it)."""
    return (f"{comm:>16} {pid}/{pid} {ts_ns // 10**9}.{ts_ns % 10**9:09d}: faultline:tcp_segments: "
            f"sent={sent} retransmitted={retransmitted}\n")


class Sampler:
    """A daemon thread sampling `pid`'s namespace every `period` s from `start()` to `stop()`;
    `write()` saves the lines. A failed read skips its sample: the recording must go on."""

    def __init__(self, pid, period=PERIOD_S):
        self.pid = pid
        self.period = period
        try:
            with open(f"/proc/{pid}/comm") as f:
                self.comm = f.read().strip() or str(pid)
        except OSError:
            self.comm = str(pid)
        self.samples = []  # (ts_ns, sent, retransmitted): ~one per second, small
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tcp-segments", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5 * self.period)

    def _run(self):
        prev = None
        t0 = mono_ns()
        k = 0
        while True:
            try:
                now = read_counters(self.pid)
                ts = mono_ns()
                if now is not None:
                    if prev is not None:
                        # A decrease (wrap, namespace gone and back) is no negative traffic.
                        self.samples.append((ts, max(0, now[0] - prev[0]), max(0, now[1] - prev[1])))
                    prev = now
            except Exception as e:  # noqa: BLE001 - a sampler bug must not end the case
                print(f"   tcp_segments: sample skipped: {e}", flush=True)
            # Absolute deadlines: the cadence does not drift by the read's own time.
            k += 1
            if self._stop.wait(max(0.0, (t0 + int(k * self.period * 1e9) - mono_ns()) / 1e9)):
                return

    def write(self, path, start_ns=None, end_ns=None):
        """Writes the samples inside [start_ns, end_ns] (the decoded trace's window) in time
        order; returns how many."""
        kept = [s for s in sorted(self.samples)
                if (start_ns is None or s[0] >= start_ns) and (end_ns is None or s[0] <= end_ns)]
        with open(path, "w") as f:
            f.writelines(format_line(self.comm, self.pid, *s) for s in kept)
        return len(kept)


def timestamp_ns(line):
    """The perf-script timestamp of a (bytes) line in ns, or None when it has none."""
    m = TIMESTAMP.search(line)
    return int(m.group(1)) * 10**9 + int(m.group(2).ljust(9, b"0")[:9]) if m else None


def _keyed(lines, until_ns=None):
    # A line without a timestamp keeps its neighbour's key, so it stays where it was.
    key = 0
    for line in lines:
        ts = timestamp_ns(line)
        if ts is not None:
            if until_ns is not None and ts > until_ns:
                return
            key = ts
        yield key, line


def merge(perf_lines, tcp_path, until_ns=None):
    """The (bytes) lines of `perf_lines` with those of `tcp_path` interleaved in time order,
    streamed (the trace is never held whole); tcp lines after `until_ns` are left out (a cut
    trace). Ties keep the perf line first."""
    with open(tcp_path, "rb") as tcp:
        # A hand-edited last line without its newline would otherwise glue onto the next one.
        tcp_lines = (line if line.endswith(b"\n") else line + b"\n" for line in tcp)
        for _, line in heapq.merge(_keyed(perf_lines), _keyed(tcp_lines, until_ns), key=lambda kv: kv[0]):
            yield line
