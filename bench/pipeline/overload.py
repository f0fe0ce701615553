"""Past saturation: does the pipeline degrade gracefully, and come back?

One level at ``--overload`` times the first rate that did not hold, for ``--seconds``. Then
sending stops and three things are read:

- what the receiver answered: 2xx, or 503 shedding load from the backlog bound
  (``INBOX_MAX_BACKLOG``), each with a Retry-After so a provider knows when to come back;
  anything else (a 500, a reset or unanswered connection, a 4xx) is a failure;
- recovery: from the end of the overload, one probe event a second; the recovery time is
  when the first probe was sent whose receipt→completed was back under the bar (1 s). A
  probe turned away with 503 (the backlog still over the bound) has not recovered: a
  provider's event would have been turned away too. The bar: within 60 s;
- nothing admitted lost or doubled: every 2xx'd key one event, completed, one effect and
  one callback; the probes' likewise.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import psycopg

from bench.pipeline.levels import Mark, judged, show
from bench.pipeline.measure import LEVEL, Sender, outcome, settle, window
from bench.pipeline.playbook import BARS
from bench.pipeline.stack import Stack

RECOVERY_BAR_S = 60.0
PROBE_EVERY_S = 1.0


def _probe_ms(conn: psycopg.Connection[Any], level: str) -> float | None:
    """The probe's receipt→completed, once it is completed."""
    row = conn.execute(
        "SELECT extract(epoch FROM e.finished_at - e.received_at) * 1000 FROM events e"
        f" WHERE {LEVEL} AND e.state = 'completed'",
        window(level),
    ).fetchone()
    return None if row is None else float(row[0])


def _under(ms: float | None) -> bool:
    return ms is not None and ms <= BARS["completed_p99_ms"]


def probe(stack: Stack, name: str, ended: float, deadline_s: float) -> dict[str, Any]:
    """A probe event every ``PROBE_EVERY_S`` from ``ended`` (monotonic) until one has come
    back under the bar, or ``deadline_s`` has passed. Probes are sent and read while the
    overload's backlog drains: the recovery is what a provider's next event sees."""
    sender = Sender(stack)
    sent: list[dict[str, Any]] = []
    recovered = None
    with psycopg.connect(stack.url, autocommit=True) as conn:
        i = 0
        while recovered is None and time.monotonic() - ended < deadline_s:
            time.sleep(max(0.0, ended + i * PROBE_EVERY_S - time.monotonic()))
            at, level = time.monotonic() - ended, f"{name}-probe{i}"
            sent.append({"level": level, "at_s": round(at, 1), "status": sender.send(level, 0)})
            for p in sent:
                if p.get("ms") is None and 200 <= p["status"] < 300:
                    p["ms"] = _probe_ms(conn, p["level"])
            under = [p["at_s"] for p in sent if _under(p.get("ms"))]
            recovered = min(under) if under else None
            i += 1
    return {"probes": sent, "recovered_s": recovered}


def probes_outcome(stack: Stack, probes: list[dict[str, Any]]) -> dict[str, int]:
    """Once drained: the admitted probes' events, completed, effects and callbacks."""
    admitted = [p["level"] for p in probes if 200 <= p["status"] < 300]
    got = {"admitted": len(admitted), "events": 0, "completed": 0, "effects": 0, "delivered": 0}
    with psycopg.connect(stack.url, autocommit=True) as conn:
        for level in admitted:
            row = conn.execute(
                f"SELECT count(*), count(*) FILTER (WHERE e.state = 'completed'),"
                f" (SELECT count(*) FROM pipeline_effects f JOIN events e"
                f"   ON f.step_key = e.public_id || '.apply' WHERE {LEVEL}),"
                f" (SELECT count(*) FROM deliveries d JOIN events e ON d.event_id = e.id"
                f"   WHERE {LEVEL} AND d.state = 'delivered')"
                f" FROM events e WHERE {LEVEL}",
                window(level),
            ).fetchone()
            assert row is not None
            for key, n in zip(("events", "completed", "effects", "delivered"), row, strict=True):
                got[key] += int(n)
    return got


def shedding(sender: Sender) -> dict[str, Any]:
    """The overload's answers: admitted, shed (503) and failed (anything else)."""
    admitted = sum(v for k, v in sender.statuses.items() if 200 <= k < 300)
    shed = sender.statuses.get(503, 0)
    return {
        "admitted": admitted,
        "shed_503": shed,
        "every_503_retry_after": sender.without_retry_after == 0,
        "failures": sum(sender.statuses.values()) - admitted - shed,
        "connection_errors": sender.statuses.get(0, 0),
    }


def overload(stack: Stack, tag: str, rate: float, args: argparse.Namespace) -> dict[str, Any]:
    """The overload level, its recovery and its exactly-once check."""
    name = f"{tag}-overload"
    sender = Sender(stack)
    mark = Mark.take(stack)
    offered = sender.run(name, rate, args.seconds)
    ended = time.monotonic()
    recovery = probe(stack, name, ended, args.probe_deadline)
    drain_s = settle(stack, args.settle_deadline, since=ended)
    result = outcome(stack, name, sender)
    checked = probes_outcome(stack, recovery["probes"])
    r = judged(stack, mark, (name, rate, offered), sender, result, drain_s, checked["delivered"])
    show(r)
    r |= shedding(sender) | recovery | {"probes_outcome": checked}
    r["probes_exact"] = (
        checked["events"] == checked["admitted"]
        and checked["completed"] == checked["admitted"]
        and checked["effects"] == checked["admitted"]
        and checked["delivered"] == checked["admitted"]
    )
    r["recovered"] = r["recovered_s"] is not None and r["recovered_s"] <= RECOVERY_BAR_S
    r["graceful"] = bool(
        r["failures"] == 0
        and r["every_503_retry_after"]
        and r["recovered"]
        and r["exact"]
        and r["probes_exact"]
    )
    print(
        f"  overload at {rate:g}/s: {r['admitted']} admitted, {r['shed_503']} shed with 503"
        f" (all with Retry-After: {r['every_503_retry_after']}), {r['failures']} failures;"
        f" recovered in {r['recovered_s']} s; graceful {r['graceful']}",
        flush=True,
    )
    return r
