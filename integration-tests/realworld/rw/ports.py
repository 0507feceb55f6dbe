"""Loopback addresses for the plugins the harness starts: each run asks the kernel for
free ports, so two harness runs at once (re-diagnoses of two case directories) neither
collide on a fixed port nor talk to each other's plugin. A port is free only until the
plugin binds it; callers check that their own plugin is the one answering."""
import contextlib
import socket


def free_addrs(n):
    """`n` distinct `127.0.0.1:PORT` addresses nobody listens on right now (the kernel's
    picks for port 0, each socket held until all are picked so no port comes twice)."""
    with contextlib.ExitStack() as stack:
        picked = []
        for _ in range(n):
            s = stack.enter_context(socket.socket())
            s.bind(("127.0.0.1", 0))
            picked.append(f"127.0.0.1:{s.getsockname()[1]}")
        return picked


def free_addr():
    """One address of [`free_addrs`]."""
    return free_addrs(1)[0]
