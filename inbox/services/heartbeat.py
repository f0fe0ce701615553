"""Keeping leases alive while long steps run.

Leases are renewed at every step commit; a step that runs longer than that gets a
heartbeat: a thread that extends the lease every third of its length until the step
returns (one heartbeat keeps the leases of a whole batch whose steps run together). If the
lease was already lost, the heartbeat stops and the step's commit fails with LeaseLost, as
it would without one.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

from sqlalchemy import Engine

from inbox.domain.records import Claim
from inbox.services.ports import WorkStore
from inbox.services.wiring import work_store


class Heartbeat:
    def __init__(
        self, db: Engine | WorkStore[Any], claim: Claim | list[Claim], lease_seconds: float
    ) -> None:
        self._store = work_store(db)
        self._claims = claim if isinstance(claim, list) else [claim]
        self._lease = lease_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="lease-heartbeat", daemon=True)
        self.beats = 0

    def _beat(self) -> None:
        while not self._stop.wait(self._lease / 3):
            try:
                with self._store.begin() as tx:
                    if self._store.extend(tx, self._claims, self._lease) == 0:
                        return  # lost: nothing left to keep alive
                self.beats += 1
            except Exception:
                return  # the database is unreachable: the step's own commit will tell

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=self._lease)
