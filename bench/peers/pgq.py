"""pgqueuer 1.6 as its docs recommend for short jobs: a ``QueueManager`` on one dedicated
connection (LISTEN plus dequeues; "a single connection for QueueManager"), ``batch_size``
raised from the default 10 ("increase batch_size when jobs are short-lived"), no
``max_concurrent_tasks`` cap, durable (logged) tables, the default heartbeat. Driver:
asyncpg or psycopg's async connection (autocommit, as the driver requires).

Each job is one event; the 2-step job runs both steps in one job (pgqueuer has no steps:
the job is the unit of retry, delivery is at least once, so the effect is keyed by the
event's id and written with ON CONFLICT DO NOTHING). The effect row goes through a small
pool of the same driver, as a handler would reach its own database."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from pgqueuer.db import AsyncpgDriver, PsycopgDriver
from pgqueuer.models import Job
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries

from bench.peers import _common

ENTRY = {"noop": "noop", "2step": "two_step"}


async def _driver(url: str, kind: str) -> Any:
    if kind == "asyncpg":
        import asyncpg

        return AsyncpgDriver(await asyncpg.connect(url))
    import psycopg

    return PsycopgDriver(await psycopg.AsyncConnection.connect(url, autocommit=True))


async def _effects(url: str, kind: str, size: int) -> Any:
    """An ``execute(key)`` coroutine writing the effect row through a pool."""
    if kind == "asyncpg":
        import asyncpg

        pool = await asyncpg.create_pool(url, min_size=2, max_size=size)

        async def run_asyncpg(key: str) -> None:
            await pool.execute(_common.EFFECT_SQL_DOLLAR, key)

        return run_asyncpg
    from psycopg_pool import AsyncConnectionPool

    pool = AsyncConnectionPool(url, min_size=2, max_size=size, kwargs={"autocommit": True})
    await pool.open()

    async def run_psycopg(key: str) -> None:
        async with pool.connection() as conn:
            await conn.execute(_common.EFFECT_SQL, (key,))

    return run_psycopg


async def prepare(args: Any) -> None:
    driver = await _driver(args.url, args.driver)
    queries = Queries(driver)
    await queries.install()
    entry, keys = ENTRY[args.workload], _common.keys(args.events)
    if args.enqueue_each:
        await _enqueue_each(args, entry, keys)
        return
    for i in range(0, len(keys), _common.ENQUEUE_CHUNK):
        chunk = keys[i : i + _common.ENQUEUE_CHUNK]
        await queries.enqueue([entry] * len(chunk), [k.encode() for k in chunk], [0] * len(chunk))


async def _enqueue_each(args: Any, entry: str, keys: list[str]) -> None:
    """One job per transaction, as a web handler enqueues one per request, from
    ``--enqueue-each`` connections at once (the receiver's senders, for ours)."""

    async def sender(share: list[str]) -> None:
        queries = Queries(await _driver(args.url, args.driver))
        for key in share:
            await queries.enqueue(entry, key.encode(), 0)

    n = args.enqueue_each
    await asyncio.gather(*(sender(keys[i::n]) for i in range(n)))


async def work(args: Any) -> None:
    qm = QueueManager(Queries(await _driver(args.url, args.driver)))
    effect = await _effects(args.url, args.driver, args.concurrency)

    @qm.entrypoint("noop")
    async def noop(job: Job) -> None:
        return None

    @qm.entrypoint("two_step")
    async def two_step(job: Job) -> None:
        key = (job.payload or b"").decode()
        checked = {"checked": key}  # step 1: effect-free
        await effect(f"{checked['checked']}:apply")  # step 2: the effect, keyed

    await _common.ready_then_wait_async(args)
    await qm.run(batch_size=args.batch_size, dequeue_timeout=timedelta(seconds=5))


def main() -> None:
    args = _common.parse()
    asyncio.run(prepare(args) if args.command == "prepare" else work(args))


if __name__ == "__main__":
    main()
