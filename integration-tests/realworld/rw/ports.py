"""Loopback addresses for the plugins the harness starts: each run asks the kernel for
free ports, so two harness runs at once (two `--evaluate-only` re-diagnoses) neither
collide on a fixed port nor talk to each other's plugin."""
import socket


def free_addr():
    """A `127.0.0.1:PORT` nobody listens on right now (the kernel's pick for port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"
