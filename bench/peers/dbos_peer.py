"""DBOS 3.4 as its docs recommend for background work: a durable workflow per event,
enqueued on a queue (``DBOS.register_queue``) with ``worker_concurrency`` (workflows in
flight per process; each process has its own ``executor_id``, as the docs require without
Conductor), every step a ``@DBOS.step`` whose output is checkpointed before the next
runs. The queue's polling interval is lowered from 1 s so that polling is not the limit
(a process starts at most ``worker_concurrency`` workflows per poll).

no-op: a workflow of one effect-free step. 2-step: an effect-free step, then a step
writing the effect row keyed by the workflow's id (ON CONFLICT DO NOTHING): a step may run
again if the process dies before its checkpoint, so the effect is keyed as DBOS advises.
Jobs are enqueued by ``DBOSClient`` many to a transaction (``enqueue_in_transaction``)."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import sqlalchemy as sa
from dbos import DBOS, DBOSClient, EnqueueOptions

from bench.peers import _common

VERSION = "bench"
_local = threading.local()


def _conn(url: str) -> psycopg.Connection:
    conn = getattr(_local, "conn", None)
    if conn is None:
        conn = _local.conn = psycopg.connect(url, autocommit=True)
    return conn


def _sa_url(url: str) -> str:
    return url.replace("postgresql://", "postgresql+psycopg://", 1)


def prepare(args: Any) -> None:
    import subprocess
    import sys
    from pathlib import Path

    dbos = str(Path(sys.executable).parent / "dbos")
    subprocess.run([dbos, "migrate", "-s", args.url], check=True, capture_output=True)
    client = DBOSClient(system_database_url=args.url)
    engine = sa.create_engine(_sa_url(args.url))
    name = "noop" if args.workload == "noop" else "two_step"
    options: EnqueueOptions = {"workflow_name": name, "queue_name": "bench", "app_version": VERSION}
    keys = _common.keys(args.events)
    try:
        for i in range(0, len(keys), _common.ENQUEUE_CHUNK):
            with engine.begin() as conn:
                for key in keys[i : i + _common.ENQUEUE_CHUNK]:
                    client.enqueue_in_transaction(conn, {**options, "workflow_id": key}, key)
    finally:
        client.destroy()
        engine.dispose()


def work(args: Any) -> None:
    url = args.url
    config: Any = {
        "name": "bench",
        "system_database_url": url,
        "executor_id": f"bench-{args.index}",
        "application_version": VERSION,
        "log_level": "WARNING",
    }
    DBOS(config=config)

    @DBOS.step()
    def check(key: str) -> dict[str, str]:
        return {"checked": key}

    @DBOS.step()
    def apply(key: str) -> None:
        _conn(url).execute(_common.EFFECT_SQL, (f"{key}:apply",))

    @DBOS.workflow(name="noop")
    def noop(key: str) -> None:
        check(key)

    @DBOS.workflow(name="two_step")
    def two_step(key: str) -> None:
        apply(check(key)["checked"])

    DBOS.launch()  # no queue registered yet: nothing is dequeued before the go
    _common.ready_then_wait(args)
    DBOS.register_queue(
        "bench", worker_concurrency=args.concurrency, polling_interval_sec=args.polling
    )
    threading.Event().wait()  # until SIGTERM


def main() -> None:
    args = _common.parse()
    prepare(args) if args.command == "prepare" else work(args)


if __name__ == "__main__":
    main()
