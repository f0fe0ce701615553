"""A bare Celery app with a no-op task: the per-message ceiling on the same broker.

    celery -A bench._drain_rawapp worker -Q bench_idle --concurrency N

The worker starts on an idle queue; the benchmark then tells it to consume ``bench_raw``
(already holding every message), so start-up time is not measured. Each task counts
itself with one Redis INCR; the one that reaches the total records the finishing time.

Environment: BENCH_BROKER_URL (Redis), BENCH_RAW_ACKS_LATE (1/0), BENCH_RAW_PREFETCH
(worker_prefetch_multiplier; Celery's default is 4).
"""

from __future__ import annotations

import os
import time

import redis
from celery import Celery

BROKER = os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/9")
QUEUE = "bench_raw"
IDLE_QUEUE = "bench_idle"
COUNTER = "bench:raw:done"
FINISHED = "bench:raw:finished"
TASK = "bench.noop"

app = Celery("bench_raw", broker=BROKER)
app.conf.update(
    task_default_queue=QUEUE,
    task_acks_late=os.environ.get("BENCH_RAW_ACKS_LATE", "1") == "1",
    task_reject_on_worker_lost=os.environ.get("BENCH_RAW_ACKS_LATE", "1") == "1",
    worker_prefetch_multiplier=int(os.environ.get("BENCH_RAW_PREFETCH", "4")),
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    broker_transport_options={"visibility_timeout": 3600},
    worker_hijack_root_logger=False,
)

_client: redis.Redis | None = None


@app.task(name=TASK)
def noop(total: int) -> None:
    global _client
    if _client is None:  # made lazily, so each pool process has its own connection
        _client = redis.Redis.from_url(BROKER)
    if _client.incr(COUNTER) == total:
        _client.set(FINISHED, repr(time.time()))
