"""The real worker app, with the batched drain prototype in place of ``drain_once``.

    celery -A bench._drain_protoapp worker -Q inbox --concurrency N

Everything else is the shipped ``workers.tasks``: the same task, doorbell, time budget
and help-when-the-batch-is-full logic; only the body of one drain round differs.
"""

from __future__ import annotations

from bench._drain_batched import drain_batched_once
from workers import tasks
from workers.app import app

tasks.drain_once = drain_batched_once  # type: ignore[assignment]

__all__ = ["app"]
