"""Random interleavings of ordered lanes, and the rules they must keep: a program of
arrivals, claims by several workers, completions, retries, permanent failures, expired
leases swept back, operators' replays and skips, run against a store (the in-memory one,
or PostgreSQL's), with the lane's rules checked after every step:

- at most one event of a lane runs at a time;
- an event is claimed only when every earlier event of its lane is completed, or
  quarantined and skipped by an operator (a quarantined event holds its lane);
- once every blocker is skipped, every lane drains (nothing is stranded).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from hypothesis import strategies as st

from inbox.domain.errors import LeaseLost
from inbox.domain.records import Claim

LANES = (b"lane-a", b"lane-b", b"lane-c")
MAX_ATTEMPTS = 3


@dataclass(frozen=True)
class Row:
    lane: bytes
    state: str
    skipped: bool


class Harness(Protocol):
    def add(self, lane: bytes) -> int: ...

    def claim(self, limit: int) -> list[Claim]: ...

    def complete(self, c: Claim) -> None: ...

    def fail(self, c: Claim, permanent: bool) -> None: ...

    def expire_and_sweep(self, c: Claim) -> None: ...

    def replay(self, event_id: int) -> None: ...

    def skip(self, event_id: int) -> None: ...

    def rows(self) -> dict[int, Row]: ...


_ADD = st.tuples(st.just("add"), st.integers(0, len(LANES) - 1))
_CLAIM = st.tuples(st.just("claim"), st.integers(1, 3))
_FAIL = st.tuples(st.just("fail"), st.integers(0, 5), st.booleans())
# Arrivals, claims and failures weigh double: they make the lanes' conflicts.
OPS = st.one_of(
    _ADD,
    _ADD,
    _CLAIM,
    _CLAIM,
    _FAIL,
    _FAIL,
    st.tuples(st.just("complete"), st.integers(0, 5)),
    st.tuples(st.just("expire"), st.integers(0, 5)),
    st.tuples(st.just("replay"), st.integers(0, 5)),
    st.tuples(st.just("skip"), st.integers(0, 5)),
)
PROGRAMS = st.lists(OPS, min_size=1, max_size=40)
# Always run: a poison event before another of its lane; a skipped blocker replayed while
# the event after it runs.
POISON = [("add", 0), ("add", 0), ("claim", 3), ("fail", 0, True), ("claim", 3)]
REPLAYED_WHILE_RUNNING = [
    *POISON[:4],
    ("skip", 0),
    ("claim", 3),
    ("replay", 0),
    ("claim", 3),
]


@dataclass
class Checker:
    h: Harness
    held: list[Claim] = field(default_factory=list)
    claimed: int = 0

    def check_claimed(self, claims: list[Claim]) -> None:
        rows = self.h.rows()
        for c in claims:
            me = rows[c.id]
            for other_id, other in rows.items():
                if other.lane != me.lane or other_id == c.id:
                    continue
                assert other.state != "processing", f"{c.id} claimed while {other_id} runs"
                if other_id < c.id:
                    ok = other.state == "completed" or (
                        other.state == "quarantined" and other.skipped
                    )
                    assert ok, f"{c.id} claimed before {other_id} ({other.state}) of its lane"

    def check_one_running(self) -> None:
        running: dict[bytes, int] = {}
        for row in self.h.rows().values():
            if row.state == "processing":
                running[row.lane] = running.get(row.lane, 0) + 1
        assert all(n <= 1 for n in running.values()), running

    def step(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        if kind == "add":
            self.h.add(LANES[op[1]])
        elif kind == "claim":
            claims = self.h.claim(op[1])
            self.check_claimed(claims)
            self.held += claims
            self.claimed += len(claims)
        elif kind in ("complete", "fail", "expire") and self.held:
            c = self.held.pop(op[1] % len(self.held))
            try:
                if kind == "complete":
                    self.h.complete(c)
                elif kind == "fail":
                    self.h.fail(c, op[2])
                else:
                    self.h.expire_and_sweep(c)
            except LeaseLost:
                pass
        elif kind == "replay":
            dead = sorted(i for i, r in self.h.rows().items() if r.state == "quarantined")
            if dead:
                self.h.replay(dead[op[1] % len(dead)])
        elif kind == "skip":
            blocking = sorted(
                i for i, r in self.h.rows().items() if r.state == "quarantined" and not r.skipped
            )
            if blocking:
                self.h.skip(blocking[op[1] % len(blocking)])
        self.check_one_running()

    def drain_all(self) -> None:
        """Every claim held completes, every blocker is skipped, and the lanes drain."""
        for c in self.held:
            try:
                self.h.complete(c)
            except LeaseLost:
                pass
        self.held = []
        for _ in range(200):
            for i, r in self.h.rows().items():
                if r.state == "quarantined" and not r.skipped:
                    self.h.skip(i)
            claims = self.h.claim(3)
            if not claims:
                break
            self.check_claimed(claims)
            for c in claims:
                self.h.complete(c)
        left = {i: r.state for i, r in self.h.rows().items() if r.state not in FINISHED}
        assert not left, f"stranded: {left}"


FINISHED = ("completed", "quarantined")


def run(h: Harness, program: list[tuple[Any, ...]]) -> None:
    checker = Checker(h)
    for op in program:
        checker.step(op)
    checker.drain_all()
