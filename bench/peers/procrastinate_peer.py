"""procrastinate 3.10 as its docs recommend for async I/O jobs: ``async def`` tasks, the
worker's ``concurrency`` (jobs in flight per process; "do not use concurrency if you have
synchronous blocking tasks": these are async), LISTEN/NOTIFY on (the default), finished
jobs kept (the default), the ``PsycopgConnector`` pool sized to the concurrency plus the
listener.

Each job is one event; the 2-step job runs both steps in one task (procrastinate has no
durable steps: a task is retried whole, so the effect is keyed by the event's id and
written with ON CONFLICT DO NOTHING). Chaining a second job from the first would add a
defer and a job per event and still not make the handoff atomic with the first job's
completion."""

from __future__ import annotations

import asyncio
from typing import Any

import procrastinate
from psycopg_pool import AsyncConnectionPool

from bench.peers import _common

_effects: dict[str, AsyncConnectionPool] = {}


def make_app(url: str, pool_size: int) -> procrastinate.App:
    connector = procrastinate.PsycopgConnector(conninfo=url, min_size=2, max_size=pool_size)
    app = procrastinate.App(connector=connector)

    @app.task(name="noop", queue="bench")
    async def noop(key: str) -> None:
        return None

    @app.task(name="two_step", queue="bench")
    async def two_step(key: str) -> None:
        checked = {"checked": key}  # step 1: effect-free
        async with _effects["pool"].connection() as conn:  # step 2: the effect, keyed
            await conn.execute(_common.EFFECT_SQL, (f"{checked['checked']}:apply",))

    return app


async def prepare(args: Any) -> None:
    app = make_app(args.url, 4)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        task = app.tasks["noop" if args.workload == "noop" else "two_step"]
        keys = _common.keys(args.events)
        for i in range(0, len(keys), _common.ENQUEUE_CHUNK):
            await task.batch_defer_async(*({"key": k} for k in keys[i : i + _common.ENQUEUE_CHUNK]))


async def work(args: Any) -> None:
    app = make_app(args.url, args.concurrency + 2)
    pool = AsyncConnectionPool(
        args.url, min_size=2, max_size=args.concurrency, kwargs={"autocommit": True}, open=False
    )
    await pool.open()
    _effects["pool"] = pool
    async with app.open_async():
        await _common.ready_then_wait_async(args)
        await app.run_worker_async(queues=["bench"], concurrency=args.concurrency, wait=True)


def main() -> None:
    args = _common.parse()
    asyncio.run(prepare(args) if args.command == "prepare" else work(args))


if __name__ == "__main__":
    main()
