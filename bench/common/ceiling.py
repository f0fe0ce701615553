"""The arithmetic of ``bench.limits``: a path's counts per event, the events/s a commit
ceiling allows on it, pgbench's output read, and the Limits table. Pure: no server, no
playbook registered on import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Count:
    """What one path spent on the inbox's database for ``events`` events: transactions
    (read-only ones included), writing commits (each waits for a WAL flush) and
    statements (round trips)."""

    transactions: int
    commits: int
    statements: int
    events: int

    @property
    def transactions_per_event(self) -> float:
        return self.transactions / self.events

    @property
    def commits_per_event(self) -> float:
        return self.commits / self.events

    @property
    def trips_per_event(self) -> float:
        return self.statements / self.events


def allowed(ceiling: float, commits_per_event: float) -> float | None:
    """Events/s the database's commit ceiling allows on a path spending
    ``commits_per_event`` (None: the path commits nothing)."""
    if commits_per_event <= 0:
        return None
    return ceiling / commits_per_event


def limit_row(path: str, count: Count, ceiling: float, today: float | None) -> dict[str, Any]:
    """One line of the Limits table: the counts, the events/s the ceiling allows, and
    today's figure as a fraction of it."""
    most = allowed(ceiling, count.commits_per_event)
    share = None if most is None or today is None else today / most
    return {
        "path": path,
        "events": count.events,
        "transactions": count.transactions,
        "commits": count.commits,
        "statements": count.statements,
        "transactions_per_event": round(count.transactions_per_event, 3),
        "commits_per_event": round(count.commits_per_event, 3),
        "round_trips_per_event": round(count.trips_per_event, 3),
        "ceiling_commits_per_s": round(ceiling),
        "allowed_events_per_s": None if most is None else round(most),
        "today_events_per_s": today,
        "today_of_allowed": None if share is None else round(share, 3),
    }


def best_tps(levels: dict[int, float]) -> tuple[int, float]:
    """(clients, transactions/s) of the best pgbench level."""
    clients = max(levels, key=lambda c: levels[c])
    return clients, levels[clients]


_TPS = re.compile(r"tps = ([0-9.]+) \((?:without initial connection time|excluding)")


def parse_tps(output: str) -> float:
    """pgbench's transactions/s without the connections' start."""
    found = _TPS.search(output)
    if found is None:
        raise RuntimeError(f"pgbench printed no tps: {output[-400:]}")
    return float(found.group(1))


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| path | writing commits/event | transactions/event | round trips/event"
        " | ceiling commits/s | events/s allowed | today events/s | today / allowed |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        most, today, share = (
            r["allowed_events_per_s"],
            r["today_events_per_s"],
            r["today_of_allowed"],
        )
        lines.append(
            f"| {r['path']} | {r['commits_per_event']:.2f} | {r['transactions_per_event']:.2f}"
            f" | {r['round_trips_per_event']:.2f} | {r['ceiling_commits_per_s']:,}"
            f" | {'-' if most is None else f'{most:,}'}"
            f" | {'-' if today is None else f'{today:,.0f}'}"
            f" | {'-' if share is None else f'{share:.2f}'} |"
        )
    return "\n".join(lines)
