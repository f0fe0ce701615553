"""Celery beat's scheduler, sending only while this beat holds the beat lease.

Several beats may run (one per host, so the lifeline outlives a host); one sends the
sweep and the prune, the others keep their schedules and stand by
(``inbox.infra.broker.BeatLease``). ``workers/app.py`` names it as ``beat_scheduler``.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from celery.beat import PersistentScheduler

from inbox.infra import broker
from workers.app import settings

log = logging.getLogger(__name__)


class LeaderScheduler(PersistentScheduler):  # type: ignore[misc]
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lease = broker.BeatLease(
            settings.redis_url,
            broker.beat_lease_seconds(settings.sweep_seconds),
            # The same beat after a restart (same host, same schedule file) takes its
            # lease back at once, instead of standing by until it lapses.
            f"{socket.gethostname()}:{os.path.abspath(self.schedule_filename)}",
        )
        self.leading: bool | None = None

    def apply_entry(self, entry: Any, producer: Any = None) -> None:
        # Checked at every due entry: the sweep is due every INBOX_SWEEP_SECONDS, so the
        # leader renews its lease that often.
        leading = self.lease.held()
        if leading != self.leading:
            self.leading = leading
            if leading:
                log.info("beat: leading; this beat sends the periodic tasks")
            else:
                log.info("beat: standing by; another beat sends the periodic tasks")
        if leading:
            super().apply_entry(entry, producer=producer)

    def close(self) -> None:
        super().close()
        self.lease.release()
