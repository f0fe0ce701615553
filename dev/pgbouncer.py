"""A PgBouncer of one's own, in transaction mode, in front of a PostgreSQL server.

For the tests and benchmarks that run the inbox behind a pooler (``INBOX_DB_POOLER``):
Debian's ``pgbouncer`` started on a free port on 127.0.0.1 with a configuration in a
temporary folder (``auth_type = trust``, ``pool_mode = transaction``, its defaults
otherwise: no ``ignore_startup_parameters``, no prepared-statement support), stopped by
its pid. Never the system's service (port 6432).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from dev.embedded import free_port, reachable


def available() -> str | None:
    """None when a private PgBouncer can run here; else why not (a test's skip reason)."""
    if shutil.which("pgbouncer") is None:
        return "pgbouncer is not installed (Debian: apt-get install pgbouncer)"
    return None


class PgBouncer:
    """``pgbouncer`` in transaction mode on a free port, in front of ``server_url``'s host
    and port (every database name passes through). ``url(db_url)`` is ``db_url`` with its
    host and port replaced by the pooler's."""

    def __init__(self, server_url: str, pool_size: int = 20, max_client_conn: int = 1000) -> None:
        why = available()
        if why is not None:
            raise RuntimeError(why)
        target = urlsplit(server_url)
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="inbox-pgbouncer-"))
        user = target.username or "postgres"
        (self.root / "userlist.txt").write_text(f'"{user}" ""\n')
        (self.root / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={target.hostname or '127.0.0.1'} port={target.port or 5432}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {self.root / 'userlist.txt'}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {pool_size}\n"
            f"max_client_conn = {max_client_conn}\n"
            f"logfile = {self.root / 'pgbouncer.log'}\n"
            f"pidfile = {self.root / 'pgbouncer.pid'}\n"
        )
        args = ["pgbouncer", str(self.root / "pgbouncer.ini")]
        if os.geteuid() == 0:  # PgBouncer refuses to run as root
            os.chmod(self.root, 0o755)
            for path in [self.root, *self.root.iterdir()]:
                shutil.chown(path, "postgres")
            args += ["-u", "postgres"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not reachable("127.0.0.1", self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"pgbouncer did not start: {self.log()[-2000:]}")
            time.sleep(0.05)

    def url(self, db_url: str) -> str:
        """``db_url`` through this pooler (same user, database and query)."""
        parts = urlsplit(db_url)
        netloc = parts.netloc.rsplit("@", 1)
        auth = netloc[0] + "@" if len(netloc) == 2 else ""
        return parts._replace(netloc=f"{auth}127.0.0.1:{self.port}").geturl()

    def log(self) -> str:
        try:
            return (self.root / "pgbouncer.log").read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # PgBouncer's immediate shutdown
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        shutil.rmtree(self.root, ignore_errors=True)
