"""A database outage reads as one line per process, not as a traceback per task.

During a failover every task of a worker or courier fails the same way for a few
seconds. ``Outages.absorb`` takes such an error (``inbox.store.db.availability.unavailable``
says which errors are an outage): the first of an outage is logged as one WARNING,
``database unavailable: <cause>; retrying``, and counted
(``inbox_database_outages_total``); the rest of that outage are silent. The first task
started after the outage began that gets through ends it with one INFO line. Nothing is lost by
dropping the task: leases lapse and the sweeper re-rings for everything still due.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from inbox.infra import metrics
from inbox.store.db.availability import busy, unavailable

log = logging.getLogger(__name__)


def timed_out(exc: BaseException) -> str | None:
    """Why, when ``exc`` is one statement cut at its deadline by a live server (a lock
    another transaction holds, a slow moment): not an outage, and not a bug either."""
    return busy(exc)


class Outages:
    """This process's view of the database: answering, or in an outage since when."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: float | None = None
        self._pid = os.getpid()

    def absorb(self, exc: BaseException) -> bool:
        """True when ``exc`` is the database being unavailable (logged once per outage);
        False when it is some other error, for the caller to raise."""
        cause = unavailable(exc)
        if cause is None:
            return False
        with self._lock:
            if self._pid != os.getpid():  # a forked child starts with its own view
                self._pid, self._since = os.getpid(), None
            if self._since is not None:
                return True
            self._since = time.monotonic()
        log.warning("database unavailable: %s; retrying", cause, extra={"pid": os.getpid()})
        metrics.record_database_outage()
        return True

    def answered(self, started: float) -> None:
        """A task that ``started`` (``time.monotonic()``) got through: an outage that began
        before it did is over. One that began while it ran is not: the task may have done
        its last statement before the outage, and with several tasks at once (a courier's
        threads) its success ended the outage a moment after another task's failure began
        it, so one failover read as two."""
        if self._since is None:
            return
        with self._lock:
            if self._since is None or started < self._since:
                return
            since, self._since = self._since, None
            if self._pid != os.getpid():
                self._pid = os.getpid()
                return
        took = time.monotonic() - since
        log.info("database available again after %.1f s", took, extra={"pid": os.getpid()})
