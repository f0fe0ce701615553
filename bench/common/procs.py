"""Databases and processes: a fresh migrated database per run, and the processes a
benchmark starts (the project's web server, celery workers and beat), each in its own
session with its output in ``.data/``, and the waits until they answer.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

BENCH = Path(__file__).resolve().parent.parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"
BIN = Path(sys.executable).parent
LOGS = ROOT / ".data"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def empty_database(pg_url: str, prefix: str) -> tuple[str, str]:
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, query = pg_url.partition("?")
    return name, base.rsplit("/", 1)[0] + "/" + name + ("?" + query if query else "")


def create_database(pg_url: str, prefix: str = "inbox_bench") -> tuple[str, str]:
    """A fresh database, migrated to head: (name, url)."""
    from inbox.store.schema import migrate

    name, url = empty_database(pg_url, prefix)
    migrate.upgrade(url)
    return name, url


@contextlib.contextmanager
def source_database(
    pg_url: str | None,
    prefix: str,
    source: tuple[str, str, str],
    cluster_settings: dict[str, str] | None = None,
) -> Iterator[str]:
    """A fresh migrated database with one tenant and one ``hmac`` source made by the
    project's CLI (``source``: tenant, name, secret), on ``pg_url``'s server or else on a
    private cluster started with ``cluster_settings``; its url. Dropped afterwards (and the
    cluster stopped). Signing secrets need ``INBOX_KEK`` (``use_own_kek``)."""
    from dev.embedded import PrivatePostgres

    cluster = None
    if pg_url is None:
        cluster = PrivatePostgres(settings=cluster_settings)
        pg_url = cluster.url
    try:
        # The payloads' key store, a database of its own beside it (INBOX_KEYSTORE_URL),
        # as in production; every process this run starts inherits it.
        keys_name, keys_url = empty_database(pg_url, prefix + "_keys")
        kept = os.environ.get("INBOX_KEYSTORE_URL")
        os.environ["INBOX_KEYSTORE_URL"] = keys_url
        name, db_url = create_database(pg_url, prefix)
        try:
            tenant, source_name, secret = source
            env = {**os.environ, "DATABASE_URL": db_url}
            cli = [sys.executable, "-m", "inbox.cli"]
            made = [
                "--tenant",
                tenant,
                "--name",
                source_name,
                "--scheme",
                "hmac",
                "--secret",
                secret,
            ]
            for cmd in (["tenants", "create", tenant], ["sources", "create", *made]):
                subprocess.run([*cli, *cmd], env=env, cwd=ROOT, check=True, capture_output=True)
            yield db_url
        finally:
            drop_database(pg_url, name)
            drop_database(pg_url, keys_name)
            if kept is None:
                os.environ.pop("INBOX_KEYSTORE_URL", None)
            else:
                os.environ["INBOX_KEYSTORE_URL"] = kept
    finally:
        if cluster is not None:
            cluster.stop()


def drop_database(pg_url: str, name: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def web_args(app: str, port: int, workers: int, threads: int) -> list[str]:
    """The project's web server (``python -m web``, as the Procfile runs it) on 127.0.0.1."""
    return [
        *(str(BIN / "python"), "-m", "web", "--app", app, "--host", "127.0.0.1"),
        *("--port", str(port), "--workers", str(workers), "--threads", str(threads)),
    ]


def use_own_kek() -> None:
    """Signing secrets are encrypted at rest (INBOX_KEK): the run's own key, for all."""
    from cryptography.fernet import Fernet

    os.environ.setdefault("INBOX_KEK", Fernet.generate_key().decode())


class Proc:
    """A process we started, in its own session (``stop`` signals that process group and
    nothing else), its output in ``.data/bench-<tag>-<pid>.log``."""

    def __init__(
        self, args: list[str], env: Mapping[str, str | None], tag: str, cwd: Path = ROOT
    ) -> None:
        """``env`` adds to this process's environment; a None value removes the variable."""
        LOGS.mkdir(exist_ok=True)
        self.tag = tag
        self.node = ""  # a celery worker's node name
        self.log_path = LOGS / f"bench-{tag}-{os.getpid()}.log"
        self._log = open(self.log_path, "wb")
        self.popen = subprocess.Popen(
            args,
            env={k: v for k, v in {**os.environ, **env}.items() if v is not None},
            cwd=cwd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.pid = self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.popen.wait(5)
        self._log.close()

    def tail(self, n: int = 40) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])


class PrivateRedis:
    """A redis-server of the run's own on a free port (never the shared one on 6379, which
    others use: a benchmark flushes its broker); ``restart`` keeps the port."""

    def __init__(self, tag: str = "redis") -> None:
        self.tag = tag
        if shutil.which("redis-server") is None:
            raise RuntimeError("redis-server is not installed")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc = self._start()

    def _start(self) -> Proc:
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
        proc = Proc([*args, "--save", "", "--appendonly", "no"], {}, self.tag)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5),
            ):
                return proc
            time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start:\n{proc.tail()}")

    def restart(self) -> None:
        self.proc.stop()
        self.proc = self._start()

    def stop(self) -> None:
        self.proc.stop()


def celery_worker(
    app: str, queue: str, concurrency: int, env: dict[str, str], tag: str, *extra: str
) -> Proc:
    """``extra``: more of the worker's options (``--pool threads``, ``--loglevel INFO``)."""
    node = f"{tag}-{time.monotonic_ns()}@%h"
    level = os.environ.get("BENCH_CELERY_LOGLEVEL", "WARNING")
    args = [
        *(str(BIN / "celery"), "-A", app, "worker", "-Q", queue, "--concurrency", str(concurrency)),
        *("-n", node, "--loglevel", level, "--without-gossip", "--without-mingle", *extra),
    ]
    proc = Proc(args, env, tag)
    proc.node = node.replace("%h", socket.gethostname())
    return proc


def celery_beat(app: str, env: dict[str, str], tag: str) -> Proc:
    schedule = LOGS / f"bench-{tag}-{os.getpid()}.schedule"
    args = [str(BIN / "celery"), "-A", app, "beat", "--loglevel", "WARNING"]
    return Proc([*args, "--schedule", str(schedule)], env, tag)


def web(
    app: str, env: Mapping[str, str | None], workers: int, threads: int, tag: str = "web"
) -> tuple[Proc, int]:
    port = free_port()
    env = {"WEB_GRACEFUL_TIMEOUT": "5", **env}
    return Proc(web_args(app, port, workers, threads), env, tag), port


def wait_ready(proc: Proc, what: str, timeout: float, ready: Callable[[], bool]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{what} exited:\n{proc.tail()}")
        if ready():
            return
    raise RuntimeError(f"{what} not ready:\n{proc.tail()}")


def wait_http(proc: Proc, port: int, timeout: float = 30, any_answer: bool = False) -> None:
    """Until ``GET /healthz`` answers 200 (``any_answer``: answers at all)."""

    def ready() -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        try:
            conn.request("GET", "/healthz")
            return conn.getresponse().status == 200 or any_answer
        except OSError:
            time.sleep(0.1)
            return False
        finally:
            conn.close()

    wait_ready(proc, "web server", timeout, ready)


def wait_celery(control_app: Any, proc: Proc, timeout: float = 60) -> None:
    """Until the worker answers a broadcast ping (its consumer and pool are up)."""

    def ready() -> bool:
        # A connection of its own per ping: a pooled one may be stale after a broker restart
        # (the soak restarts Redis), and a broker still starting is "not ready yet".
        with control_app.connection_for_write() as conn:
            try:
                replies = control_app.control.ping(
                    destination=[proc.node], timeout=0.5, connection=conn
                )
            except conn.connection_errors:
                time.sleep(0.1)
                return False
        return any(proc.node in r for r in replies)

    wait_ready(proc, "celery worker", timeout, ready)


def wait_progress(
    done: Callable[[], int], n: int, what: str, stalled: Callable[[int], None] | None = None
) -> None:
    """Until ``done()`` reaches ``n``. Each time it stays put for 20 s: ``stalled(done)``,
    or (None) give up after 60 s."""
    last, since = -1, time.monotonic()
    while (now := done()) < n:
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > (60 if stalled is None else 20):
            if stalled is None:
                raise RuntimeError(f"{what} stalled at {now}/{n}")
            stalled(now)
            since = time.monotonic()
        time.sleep(0.2)


def server_arguments(p: argparse.ArgumentParser) -> None:
    """The receiver's server flags (``python -m web``'s defaults: one worker per core, 24
    threads) and its database pool, and a server of one's own for the databases."""
    from inbox.infra import config
    from inbox.infra.config import Settings
    from web import serve

    deployed = serve.server_settings(config.settings())
    p.add_argument("--workers", type=int, default=deployed.workers)
    p.add_argument("--threads", type=int, default=deployed.threads)
    p.add_argument(
        "--pool-size",
        type=int,
        default=int(os.environ.get("INBOX_DB_POOL_SIZE") or Settings.pool_size),
        help="database connections per worker process",
    )
    p.add_argument(
        "--pg-url",
        default=os.environ.get("BENCH_PG_URL"),
        help="a maintenance database on a server of your own (default: a private cluster,"
        " initdb/pg_ctl, PostgreSQL's default settings, so that all of its CPU is the run's)",
    )


def tear_down(
    running: list[Proc],
    sink: subprocess.Popen[bytes] | None,
    broker: PrivateRedis | None,
    server: str,
    db_name: str,
) -> None:
    """A run's end, whatever happened: its processes, its sink, its private Redis and its
    database, each stopped or dropped by the handle the run kept."""
    for p in running:
        p.stop()
    if sink is not None:
        sink.terminate()
        sink.wait(5)
        if sink.stdout is not None:
            sink.stdout.close()
    if broker is not None:
        broker.stop()
    if db_name:
        drop_database(server, db_name)


def write_report(out: Path, fields: dict[str, Any]) -> None:
    """A benchmark's JSON: the date first, then ``fields``; says where it went."""
    report = {"date": datetime.now(UTC).isoformat(timespec="seconds"), **fields}
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"wrote {out}")
