"""Overlap and order of ordered lanes, counted from the effects: the ``lane`` playbook
(tests/sink_playbooks.py) writes a sink row as its step starts and one as it ends or fails."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Verdict:
    overlaps: int = 0  # a start of an event while another of its lane had started, not ended
    out_of_order: int = 0  # an event first started before an earlier one of its lane
    starts: dict[str, list[int]] = field(default_factory=dict)  # lane -> positions, in order
    ends: dict[str, list[int]] = field(default_factory=dict)  # lane -> first ends, in order


def judge(rows: Iterable[Any], position: dict[str, tuple[str, int]]) -> Verdict:
    """``rows``: sink rows in id order (``step``: start, end or fail; ``event``: public id);
    ``position``: each event's lane and its place in it (what the sender sent it as)."""
    v = Verdict()
    running: dict[str, str | None] = {}
    seen: set[str] = set()
    for r in rows:
        if r.event not in position or r.step not in ("start", "end", "fail"):
            continue
        lane, n = position[r.event]
        if r.step == "start":
            other = running.get(lane)
            if other is not None and other != r.event:
                v.overlaps += 1
            running[lane] = r.event
            if r.event not in seen:
                seen.add(r.event)
                v.starts.setdefault(lane, []).append(n)
        else:
            if running.get(lane) == r.event:
                running[lane] = None
            done = v.ends.setdefault(lane, [])
            if r.step == "end" and n not in done:  # a rerun's end (lease lost) counts once
                done.append(n)
    for order in v.starts.values():
        v.out_of_order += sum(1 for a, b in itertools.pairwise(order) if b < a)
    return v
