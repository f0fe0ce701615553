"""Celery beat's scheduler, sending only while this beat holds the beat lease.

Several beats may run (one per host, so the lifeline outlives a host); one sends the
sweep and the prune, the others keep their schedules and stand by
(``inbox.infra.broker.BeatLease``). ``workers/app.py`` names it as ``beat_scheduler``.

The schedule is kept in memory, never in a file: beat runs from any directory, read-only
ones too, and every entry is due once at start (a sweep, a prune and the partitions are
safe to run at any time, and a beat that restarts often still runs its hourly tasks).
``--schedule`` is accepted and only names this beat for its lease.
"""

from __future__ import annotations

import logging
import os
import socket
from datetime import UTC, datetime
from typing import Any

from celery.beat import Scheduler

from inbox.infra import broker
from workers import state

log = logging.getLogger(__name__)
START = datetime(2000, 1, 1, tzinfo=UTC)


class LeaderScheduler(Scheduler):  # type: ignore[misc]
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        name = kwargs.pop("schedule_filename", None) or "celerybeat-schedule"
        super().__init__(*args, **kwargs)
        settings = state.settings()
        self.lease = broker.BeatLease(
            settings.redis_url,
            broker.beat_lease_seconds(settings.sweep_seconds),
            # The same beat after a restart (same host, same directory and --schedule)
            # takes its lease back at once, instead of standing by until it lapses.
            f"{socket.gethostname()}:{os.path.abspath(name)}",
        )
        self.leading: bool | None = None

    def setup_schedule(self) -> None:
        super().setup_schedule()
        for entry in self.schedule.values():
            entry.last_run_at = START  # due at once: the first tick sends each

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
