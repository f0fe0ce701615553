"""The web's doorbell rings from a thread of its own (``broker.Ringer``): a request never
waits on Redis or the broker, the rings of a process coalesce, and every want is followed
by a ring that started after it."""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time

import pytest

from inbox.infra.broker import Ringer
from tests.helpers import eventually, wait_for


def test_a_want_returns_at_once_and_is_rung_by_the_thread() -> None:
    release = threading.Event()
    callers: list[str] = []

    def ring() -> None:
        callers.append(threading.current_thread().name)
        release.wait(30)  # a stalled Redis

    ringer = Ringer(ring, gap=0)
    started = time.monotonic()
    ringer()
    assert time.monotonic() - started < 1.0  # the request did not wait on the stall
    wait_for(lambda: callers == ["inbox-doorbell"])
    release.set()
    wait_for(lambda: ringer.rings == 1)


def test_wants_during_a_ring_coalesce_into_one_more_ring() -> None:
    release = threading.Event()
    entered = threading.Event()

    def ring() -> None:
        entered.set()
        release.wait(30)

    ringer = Ringer(ring, gap=0)
    ringer()
    assert entered.wait(30)
    for _ in range(200):  # the events committed while the first ring is out
        ringer()
    release.set()
    wait_for(lambda: ringer.rings == 2)
    # A third ring comes only if a ring is still wanted: none is, the 200 wants were one.
    assert not ringer._wanted
    assert ringer.rings == 2


def test_every_want_is_followed_by_a_ring_that_started_after_it() -> None:
    wanted = 0
    seen_at_start: list[int] = []
    lock = threading.Lock()

    def ring() -> None:
        with lock:
            seen_at_start.append(wanted)
        os.sched_yield()  # the senders go on while a ring is out

    ringer = Ringer(ring, gap=0.002)

    def want() -> None:
        nonlocal wanted
        for _ in range(300):
            with lock:
                wanted += 1  # the commit
            ringer()  # then the ring
            os.sched_yield()

    senders = [threading.Thread(target=want) for _ in range(4)]
    for t in senders:
        t.start()
    for t in senders:
        t.join()
    # The last commit's ring has started after it: some ring saw every commit.
    wait_for(lambda: bool(seen_at_start) and seen_at_start[-1] == 1200)
    assert len(seen_at_start) < 1200  # and they coalesced


def test_a_failing_ring_is_rung_again_until_it_goes_out_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[int] = []

    def ring() -> None:  # the broker is back at the fourth try
        calls.append(1)
        if len(calls) <= 3:
            raise ConnectionError("redis is down")

    ringer = Ringer(ring, gap=0, retry=0.001, retry_max=0.01)
    with caplog.at_level(logging.INFO, logger="inbox.infra.broker"):
        ringer()  # one want, and no other: the thread alone rings again
        wait_for(lambda: ringer.rings == 1)
        wait_for(lambda: "rings again after 3 failed rings" in caplog.text)
    assert len(calls) == 4
    assert caplog.text.count("doorbell failed: ConnectionError") == 1


def test_a_ring_that_keeps_failing_waits_longer_between_tries() -> None:
    at: list[float] = []

    def ring() -> None:
        at.append(time.monotonic())
        if len(at) < 6:
            raise ConnectionError("redis is down")

    ringer = Ringer(ring, gap=0, retry=0.02, retry_max=0.08)
    ringer()
    wait_for(lambda: ringer.rings == 1)
    gaps = [b - a for a, b in itertools.pairwise(at)]
    assert gaps[0] >= 0.02 and gaps[2] >= 0.08 and gaps[4] >= 0.08  # doubled, then capped


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_rings_from_a_thread_of_its_own() -> None:
    read, write = os.pipe()

    def ring() -> None:
        os.write(write, str(os.getpid()).encode() + b"\n")

    ringer = Ringer(ring, gap=0)
    ringer()  # the parent's thread exists now
    wait_for(lambda: ringer.rings == 1)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            ringer()
            eventually(lambda: ringer.rings == 2)
        finally:
            os._exit(0 if ringer.rings == 2 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    os.close(write)
    with os.fdopen(read) as lines:
        pids = [int(line) for line in lines]
    assert pids == [os.getpid(), pid]
