"""The background job that seals payloads stored in clear (rows from before sealing was on).

Resumable: each batch commits its rows and its progress together
(``inbox.store.write.sealing_job``), so a run killed at any moment is continued by the next
from the last committed batch, and every row is sealed once. Reads work throughout: a row
says by its ``key_id`` whether it is sealed. ``inbox payloads seal`` runs it in line.
"""

from __future__ import annotations

from collections.abc import Callable

from inbox.services.runtime import Runtime
from inbox.store.db import sealing
from inbox.store.write import sealing_job as store
from inbox.store.write.sealing_job import Progress

__all__ = ["Progress", "progress", "run"]

BATCH = 500


def run(
    rt: Runtime,
    batch: int = BATCH,
    on_batch: Callable[[int], None] | None = None,
) -> int:
    """Seal every row stored in clear, a batch per transaction; how many this run sealed.
    ``on_batch`` hears each batch's count as it commits."""
    keys = sealing.for_engine(rt.engine)
    total = 0
    while True:
        with rt.engine.begin() as conn:
            n = store.seal_batch(conn, keys, batch)
        total += n
        if on_batch is not None:
            on_batch(n)
        if n < batch:
            return total


def progress(rt: Runtime) -> Progress:
    with rt.engine.connect() as conn:
        return store.progress(conn)
