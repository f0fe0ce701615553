"""One level of offered load: sent, drained, then judged against the bars.

Every level starts on an empty pipeline: once its sending stops, the run waits (on the
database's count, up to ``--settle-deadline``) until nothing is pending or running and no
delivery waits, and records that wait as the level's ``drain_s``. So no level is judged on
the backlog the one before it left, and a level that does not hold is still reported with
how long its backlog took to clear.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from bench.pipeline.measure import Sender, outcome, settle, sink_posts
from bench.pipeline.playbook import BARS
from bench.pipeline.stack import Stack, cpu_seconds
from bench.pipeline.tables import fmt


@dataclass(frozen=True)
class Mark:
    """What a level's figures are taken against: the sink's count and the CPU at its start."""

    posts: int
    cpu: dict[str, float]
    t0: float

    @classmethod
    def take(cls, stack: Stack) -> Mark:
        return cls(sink_posts(stack), cpu_seconds(stack), time.monotonic())


def judged(
    stack: Stack,
    mark: Mark,
    sent: tuple[str, float, float],
    sender: Sender,
    result: dict[str, Any],
    drain_s: float | None,
    other_posts: int = 0,
) -> dict[str, Any]:
    """A level's figures and whether it holds. ``sent``: its name, rate and achieved
    offered rate; ``other_posts``: callbacks the sink counted in the meantime that are not
    the level's own (the overload's probes), so each of the level's is counted once."""
    name, rate, offered = sent
    after, elapsed = cpu_seconds(stack), time.monotonic() - mark.t0
    processed = max(result["completed"], 1)
    cpu_ms = {
        k: round((after[k] - mark.cpu[k]) * 1000 / processed, 3) for k in after if k in mark.cpu
    }
    fivexx = sum(v for k, v in sender.statuses.items() if k >= 500 or k == 0)
    posts = sink_posts(stack) - mark.posts - other_posts
    r = {
        "level": name,
        "rate": rate,
        "offered_per_s": round(offered, 1),
        "statuses": {str(k): v for k, v in sorted(sender.statuses.items())},
        "5xx": fivexx,
        "without_retry_after": sender.without_retry_after,
        "errors": dict(sender.errors),
        "sink_posts": posts,
        "cpu_ms_per_event": cpu_ms,
        "elapsed_s": round(elapsed, 1),
        "drain_s": drain_s,
        "drained": drain_s is not None,
        **result,
    }
    p99c, p99d = result["completed_ms"]["p99"], result["callback_ms"]["p99"]
    r["exact"] = bool(
        result["lost"] == 0
        and result["doubled_events"] == 0
        and result["effects"] == result["events"]
        and result["deliveries"] == result["events"]
        and posts == result["delivered"]
    )
    r["holds"] = bool(
        fivexx == 0
        and offered >= 0.95 * rate
        and r["exact"]
        and p99c is not None
        and p99c <= BARS["completed_p99_ms"]
        and p99d is not None
        and p99d <= BARS["callback_p99_ms"]
    )
    return r


def level(
    stack: Stack, name: str, rate: float, seconds: float, settle_deadline: float
) -> dict[str, Any]:
    """One level: ``rate`` for ``seconds``, then the pipeline drained, then its figures."""
    sender = Sender(stack)
    mark = Mark.take(stack)
    offered = sender.run(name, rate, seconds)
    drain_s = settle(stack, settle_deadline)
    result = outcome(stack, name, sender)
    return judged(stack, mark, (name, rate, offered), sender, result, drain_s)


def show(r: dict[str, Any]) -> None:
    c, d = r["completed_ms"], r["callback_ms"]
    print(
        f"  {r['level']:>18} offered {r['offered_per_s']:>7.1f}/s  completed p50/p99"
        f" {fmt(c['p50'])}/{fmt(c['p99'])} ms  callback p50/p99 {fmt(d['p50'])}/"
        f"{fmt(d['p99'])} ms  5xx {r['5xx']}  lost {r['lost']}  drained in"
        f" {fmt(r['drain_s'], '.1f')} s  holds {r['holds']}",
        flush=True,
    )
