"""gunicorn settings: ``gunicorn -c web/gunicorn_conf.py web.wsgi:app``.

Prometheus multiprocess mode: every worker writes its metrics to files in
``PROMETHEUS_MULTIPROC_DIR`` and ``/metrics`` (any worker) adds them up. The variable
must be set before a worker imports ``prometheus_client``; this file runs in the master
first, so it is set here when missing (a fresh private directory, removed at exit).
Set it yourself, to the same directory for the web and Celery processes of one host,
to have one ``/metrics`` report both. Command-line flags override the values below.
"""

from __future__ import annotations

import gc
import glob
import os
import re
import shutil
import tempfile
from typing import Any

bind = f"0.0.0.0:{os.environ.get('PORT', '8000')}"
worker_class = "gthread"
# One gthread worker per core unless WEB_CONCURRENCY says otherwise, 8 threads each
# (WEB_THREADS); keep INBOX_DB_POOL_SIZE (default 10) at least as large. A worker's Python
# runs on one core at a time (the interpreter lock), and its threads queue for that lock:
# on the 2-core benchmark machine one worker of 8 threads spent 0.7 ms of CPU per request
# of a bare Flask view, two workers 0.4 ms, with three times the throughput. Eight
# threads leave room for requests that wait (``Prefer: wait``, a slow database).
workers = int(os.environ.get("WEB_CONCURRENCY") or os.cpu_count() or 1)
threads = int(os.environ.get("WEB_THREADS") or 8)

# Each worker listens on its own socket and the kernel spreads new connections over them.
# On one shared socket the worker that wakes first accepts, and under load that is the
# busy one: 28/4 and 30/1 splits of 32 keep-alive connections were measured, which left
# one worker queueing while the other idled. (A worker's own socket goes with it: the
# few connections still in its accept queue when it exits are refused, and the senders
# retry them.)
reuse_port = True


def when_ready(server: Any) -> None:
    # With reuse_port the master holds no socket, and gunicorn's own "Listening at" is empty.
    server.log.info("Listening at: %s (a socket per worker)", ", ".join(server.cfg.bind))


_OWN_DIR = "INBOX_METRICS_DIR_OWNED"  # set when this config created the directory

if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="inbox-metrics-")
    os.environ[_OWN_DIR] = os.environ["PROMETHEUS_MULTIPROC_DIR"]
os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)

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


def on_starting(server: Any) -> None:
    prune_dead_files(os.environ["PROMETHEUS_MULTIPROC_DIR"])


def child_exit(server: Any, worker: Any) -> None:
    # Imported here, not at the top: the master must not pick a value class before
    # the variable above is set.
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]


def on_exit(server: Any) -> None:
    owned = os.environ.get(_OWN_DIR)
    if owned and owned == os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        shutil.rmtree(owned, ignore_errors=True)


def post_worker_init(worker: Any) -> None:
    # Everything loaded so far (the app, its libraries) lives as long as the worker: move
    # it out of the collector's sight. Without this, each full collection walks those
    # ~80,000 objects while holding the interpreter lock; under load that stalled all of a
    # worker's threads for 45-135 ms, twice per worker in a 10 s benchmark window, which
    # was most of the receiver's p99. After: ~1 ms.
    gc.freeze()


# A keep-alive connection is closed after about this many requests (as nginx's
# keepalive_requests does), with "Connection: close" on its last answer: a connection
# stays with the worker that accepted it, so without a limit an unlucky split of
# long-lived connections (a busy sender's, a proxy's) would never even out.
keepalive_requests = int(os.environ.get("WEB_KEEPALIVE_REQUESTS") or 100)


def pre_request(worker: Any, req: Any) -> None:
    # Each connection's limit is spread over [n/2, 3n/2), so that connections opened
    # together are not all closed together.
    n = keepalive_requests
    if n > 0 and req.req_number >= n // 2:
        if req.req_number >= n // 2 + hash(req.peer_addr) % n:
            req.must_close = True
