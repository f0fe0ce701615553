"""The web process: ``python -m web`` (the Procfile's ``web``) serves ``web.wsgi:app``.

The HTTP server is granian: its HTTP/1.1 handling is Rust, and each worker process runs
the Flask app in a pool of threads; it took less CPU per request than gunicorn's threaded
workers on the 2-core benchmark machine (bench/README.md).

Settings come from the environment (docs/reference/configuration.md); the flags override them:

    python -m web [--app MODULE:NAME] [--host H] [--port N] [--workers N] [--threads N]

Prometheus multiprocess mode: every process writes its metrics to files in
``PROMETHEUS_MULTIPROC_DIR`` and ``/metrics`` (any worker) adds them up. The variable
must be set before a worker imports ``prometheus_client``, so it is set here when missing
(a fresh private directory, removed at exit). Set it yourself, to the same directory for
the web and Celery processes of one host, to have one ``/metrics`` report both.
"""

from __future__ import annotations

import argparse
import errno
import glob
import logging
import os
import re
import shutil
import socket
import sys
import tempfile
from dataclasses import dataclass, replace

from inbox.infra import config, gc_start
from inbox.infra.config import Settings


@dataclass(frozen=True)
class ServerSettings:
    host: str
    port: int
    # One worker process per core: a process runs Python on one core at a time (the
    # interpreter lock). 24 threads each: the more requests a process has in flight, the
    # more claims share each INSERT (inbox/store/db/group_commit.py); 24 did better than 8 at 32
    # senders (bench/README.md). The claims of a process use connections of their own,
    # one per statement out (INBOX_CLAIM_STATEMENTS), so the pool (INBOX_DB_POOL_SIZE) need
    # not be as large.
    workers: int
    threads: int
    backlog: int
    # A worker that stops answering a shutdown in time is killed.
    graceful_seconds: int


def server_settings(s: Settings) -> ServerSettings:
    return ServerSettings(
        host=s.web_host,
        port=s.port,
        workers=s.web_concurrency or os.cpu_count() or 1,
        threads=s.web_threads,
        backlog=s.web_backlog,
        graceful_seconds=s.web_graceful_timeout,
    )


# -- the Prometheus multiprocess directory -----------------------------------------------

_PID = re.compile(r"_(\d+)\.db$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def prune_dead_files(path: str) -> int:
    """Remove the files of processes that no longer run (a previous run's workers).

    Files of live processes (Celery workers sharing the directory) are kept.
    """
    removed = 0
    for name in glob.glob(os.path.join(path, "*.db")):
        m = _PID.search(name)
        if m and not _alive(int(m.group(1))):
            os.remove(name)
            removed += 1
    return removed


def metrics_dir(settings: Settings) -> str | None:
    """Make sure ``PROMETHEUS_MULTIPROC_DIR`` names a directory and prune it; the
    directory's path when this call created it and exported it for the workers (the caller
    removes it at exit)."""
    owned = None
    path = settings.metrics_dir
    if not path:
        path = owned = tempfile.mkdtemp(prefix="inbox-metrics-")
        config.export("PROMETHEUS_MULTIPROC_DIR", owned)
    os.makedirs(path, exist_ok=True)
    prune_dead_files(path)
    return owned


# -- granian -----------------------------------------------------------------------------


class _ThreadCountNotice(logging.Filter):
    """Drops granian's warning that more than 2 x cores + 1 threads "seems quite high": it
    assumes threads that compute, and ours mostly wait on the database."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Python threads" not in record.getMessage()


def log_config() -> dict[str, object]:
    """granian's own log lines as the project's JSON lines on stderr, like every other
    process's (its default is plain text on stdout)."""
    stream = {"class": "logging.StreamHandler", "stream": "ext://sys.stderr", "formatter": "json"}
    return {
        "filters": {"threads": {"()": _ThreadCountNotice}},
        "formatters": {"json": {"()": "inbox.infra.logs.JsonFormatter"}},
        "handlers": {"console": {**stream, "filters": ["threads"]}, "access": stream},
    }


def port_is_free(host: str, port: int) -> bool:
    """Whether ``host:port`` can be bound (as the server binds it, with SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise
    return True


def parse_args(argv: list[str] | None, settings: Settings) -> tuple[str, ServerSettings]:
    base = server_settings(settings)
    p = argparse.ArgumentParser(prog="python -m web", description="Serve the web app.")
    p.add_argument("--app", default="web.wsgi:app", help="WSGI target, MODULE:NAME")
    p.add_argument("--host", default=base.host)
    p.add_argument("--port", type=int, default=base.port)
    p.add_argument("--workers", type=int, default=base.workers)
    p.add_argument("--threads", type=int, default=base.threads)
    a = p.parse_args(argv)
    return a.app, replace(base, host=a.host, port=a.port, workers=a.workers, threads=a.threads)


def check_start() -> None:
    """Stop here, in one log line with the fix, when this process could not do its job
    (inbox.services.startup): before granian starts a worker that would answer 503."""
    from inbox.infra.logs import configure_logging
    from inbox.services import startup

    settings = config.settings()
    configure_logging(settings.log_level)  # the check's own lines are JSON lines too
    try:
        startup.check(settings)
    except startup.CannotStart as exc:
        logging.getLogger("web").critical("cannot start: %s", exc)
        sys.exit(exc.exit_code)


def main(argv: list[str] | None = None) -> None:
    from granian import Granian
    from granian.constants import HTTPModes, Interfaces
    from granian.log import LogLevels

    target, s = parse_args(argv, config.settings())
    if not port_is_free(s.host, s.port):
        # one line, not granian's traceback
        sys.exit(f"PORT {s.port} is in use on {s.host}: set PORT (or --port) to a free port")
    check_start()
    owned = metrics_dir(config.settings())
    server = Granian(
        target,
        address=s.host,
        port=s.port,
        interface=Interfaces.WSGI,
        workers=s.workers,
        blocking_threads=s.threads,
        # Webhook senders and the proxies in front of us speak HTTP/1.1.
        http=HTTPModes.http1,
        websockets=False,
        backlog=s.backlog,
        # A worker that dies (a crash, the OOM killer) is replaced, as the others serve on.
        respawn_failed_workers=True,
        respawn_interval=1.0,
        workers_kill_timeout=s.graceful_seconds,
        log_level=LogLevels.info,
        log_dictconfig=log_config(),
    )
    if owned:
        server.on_shutdown(lambda: shutil.rmtree(owned, ignore_errors=True))
    gc_start.resume()  # paused by web/__main__.py for the start
    server.serve()
