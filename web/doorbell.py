"""Ringing the workers after a commit. Replaced by the Celery doorbell once workers exist."""

from __future__ import annotations

from collections.abc import Callable

from inbox.config import Settings


def default_doorbell(settings: Settings) -> Callable[[], None]:
    def ring() -> None:
        return None

    return ring
