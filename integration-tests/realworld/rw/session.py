"""Internal faults injected through one extra SQL client session.

The session connects in `arm` — before tracing starts — so the fault does not show up as a
new server thread at its start (a coincidence a detector must not rely on); at the fault
start it sends the fault's SQL; at the end the app cancels the statement and the session
releases what it holds and quits."""
import subprocess
import time

from .apps.base import InternalFault


class PipedSession:
    """A command-line SQL client (psql, mariadb) fed through its stdin."""

    def __init__(self, argv, env_vars=None):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, text=True, env=env_vars)

    def send(self, sql):
        self.proc.stdin.write(sql + "\n")
        self.proc.stdin.flush()

    def close(self, goodbye):
        """Sends `goodbye` (rollback, unlock, quit) and waits for the client to exit."""
        try:
            self.proc.stdin.write(goodbye)
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class SessionFault(InternalFault):
    """Subclasses set `sql`; the app provides `fault_session(env)` (a PipedSession),
    `cancel_fault_session(env)` and `FAULT_SESSION_GOODBYE`."""

    sql = ""

    def arm(self, env, app):
        self.session = app.fault_session(env)
        time.sleep(0.5)
        if self.session.proc.poll() is not None:
            raise RuntimeError(f"the {app.name} fault session exited with {self.session.proc.returncode}")

    def start(self, env, app):
        self.details = {"sql": self.sql}
        self.session.send(self.sql)

    def stop(self, env, app):
        app.cancel_fault_session(env)
        self.session.close(app.FAULT_SESSION_GOODBYE)
