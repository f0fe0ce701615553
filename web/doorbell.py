"""The web side of the broker: the doorbell after a commit, and other best-effort rings.

Messages carry row ids only; the sweeper re-rings for anything a lost message missed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from inbox.config import Settings


def default_doorbell(settings: Settings) -> Callable[[], None]:
    if not settings.redis_url:
        return lambda: None  # no broker configured: the sweeper finds the events
    from workers.app import app as celery_app
    from workers.doorbell import make_doorbell

    def send() -> None:
        celery_app.send_task("inbox.drain")

    return make_doorbell(settings.redis_url, send)


def broker_hooks(settings: Settings) -> dict[str, Any]:
    """Rings used by the admin API: start a bulk replay, wake the couriers."""
    if not settings.broker_url:
        return {}
    from workers.app import DELIVERIES
    from workers.app import app as celery_app

    def start_bulk_replay(job_id: int) -> None:
        celery_app.send_task("inbox.bulk_replay", args=[job_id])

    def ring_couriers(endpoint_ids: set[int]) -> None:
        for endpoint_id in endpoint_ids:
            celery_app.send_task("inbox.deliver", args=[endpoint_id], queue=DELIVERIES)

    return {"start_bulk_replay": start_bulk_replay, "ring_couriers": ring_couriers}
