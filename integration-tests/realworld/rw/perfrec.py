"""Kernel syscall recording with `perf record` on the server's processes (threads and
children created later are followed), decoded to `perf script` text and compressed."""
import os
import signal
import subprocess

from .env import sh

EVENTS = ["-e", "raw_syscalls:sys_enter", "-e", "raw_syscalls:sys_exit", "-e", "sched:sched_stat_runtime",
          "-e", "sched:sched_switch"]
# 4 MiB per CPU: perf's default buffer silently lost ~60 % of the events on this machine.
MMAP_PAGES = "1024"


class Recording:
    """A running `perf record`; `stop()` ends it and returns perf's own summary lines."""

    def __init__(self, pids, out_path, cpu):
        self.out_path = out_path
        self.log_path = out_path + ".log"
        argv = ["taskset", "-c", str(cpu), "perf", "record", "-k", "CLOCK_MONOTONIC", "-m", MMAP_PAGES]
        argv += EVENTS + ["-p", ",".join(str(p) for p in pids), "-o", out_path]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(self.log_path, "w"))

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        with open(self.log_path) as f:
            return [line.strip() for line in f if "lost" in line.lower() or "perf record" in line]


def decode(perf_data, out_zst, start_ns, end_ns, zstd_level=6):
    """`perf script` text of [start_ns, end_ns], the format faultline's perf source reads and
    /work/shared/traces/perf-faults uses; returns the number of lines."""
    window = f"{start_ns / 1e9:.9f},{end_ns / 1e9:.9f}"
    cmd = (
        f"perf script -i {perf_data} -F comm,pid,tid,time,event,trace --ns --time {window} 2>/dev/null"
        f" | tee >(wc -l > {out_zst}.lines) | zstd -q -f -{zstd_level} -o {out_zst}"
    )
    sh("bash", "-c", cmd)
    with open(out_zst + ".lines") as f:
        lines = int(f.read().strip() or 0)
    os.unlink(out_zst + ".lines")
    return lines


def lost_events(perf_data):
    """perf's own count of lost samples (PERF_RECORD_LOST), from `perf report --stats`."""
    r = subprocess.run(["perf", "report", "-i", perf_data, "--stats"], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        if "LOST" in line and "events" not in line.split()[0]:
            parts = line.split()
            for p in parts:
                if p.isdigit():
                    return int(p)
    return 0
