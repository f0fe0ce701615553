"""The web side of the doorbell: a Redis flag, then one Celery message (row ids only)."""

from __future__ import annotations

from collections.abc import Callable

from inbox.config import Settings


def default_doorbell(settings: Settings) -> Callable[[], None]:
    if not settings.redis_url:
        return lambda: None  # no broker configured: the sweeper finds the events
    from workers.app import app as celery_app
    from workers.doorbell import make_doorbell

    def send() -> None:
        celery_app.send_task("inbox.drain")

    return make_doorbell(settings.redis_url, send)
