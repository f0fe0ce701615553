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
# One gthread worker per two cores unless WEB_CONCURRENCY says otherwise. A worker's
# Python runs on one core at a time (the interpreter lock), and where the Procfile runs,
# PostgreSQL and the Celery workers share the host's cores. On the 2-core benchmark
# machine one worker with 8 threads matched two with 16 in throughput, with a lower and
# steadier p99 at 32 senders: two workers split keep-alive connections unevenly (the one
# that wakes first accepts most of a burst and keeps them: 27/5, 29/3, 32/0 were seen).
# Eight threads (WEB_THREADS) leave room for requests that wait (``Prefer: wait``, a slow
# database) without a long queue for the interpreter lock; keep INBOX_DB_POOL_SIZE
# (default 10) at least as large.
workers = int(os.environ.get("WEB_CONCURRENCY") or max(1, (os.cpu_count() or 2) // 2))
threads = int(os.environ.get("WEB_THREADS") or 8)

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
