"""An event's public id: ``evt_``, the day of receipt, then 16 hex digits from the
operating system's CSPRNG (``secrets``), a new draw per id."""

from __future__ import annotations

import datetime as dt
import re
import threading

from inbox.domain import ledger
from tests.unit.test_intake import NOW, prepared, request, source

PUBLIC_ID = re.compile(r"evt_(\d{8})([0-9a-f]{16})")


def test_the_id_is_the_prefix_the_day_and_sixteen_hex_digits() -> None:
    public_id = prepared(source(), request(b"{}")).public_id
    found = PUBLIC_ID.fullmatch(public_id)
    assert found is not None
    day = dt.datetime.fromtimestamp(NOW, dt.UTC).date()
    assert ledger.day_of_public_id("evt_", public_id) == day


def test_threads_never_get_the_same_id() -> None:
    out: list[list[str]] = [[] for _ in range(8)]
    start = threading.Barrier(8)
    src, req = source(), request(b"{}")

    def take(mine: list[str]) -> None:
        start.wait()
        mine.extend(prepared(src, req).public_id for _ in range(500))

    threads = [threading.Thread(target=take, args=(o,)) for o in out]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = [v for o in out for v in o]
    assert all(PUBLIC_ID.fullmatch(v) for v in flat)
    assert len(set(flat)) == len(flat) == 4000
