"""The sweep's printed tables (every number is in the JSON; these are what a reader compares)."""

from __future__ import annotations

from typing import Any

CPU_KINDS = ("web", "worker", "courier", "beat", "postgres", "redis", "sink", "sender")


def fmt(v: float | None, spec: str = ",.0f") -> str:
    return "-" if v is None else format(v, spec)


def _scale(run: dict[str, Any]) -> str:
    """A run's processes: web, worker (``--concurrency``), courier."""
    return f"| {run['webs']} | {run.get('workers', 2)} | {run.get('couriers', 1)}"


def levels_table(runs: list[dict[str, Any]]) -> str:
    """The 50 % and 90 % levels of every run, every round."""
    lines = [
        "| web | worker | courier | held events/s | round | at | offered/s"
        " | completed p50 / p99 ms | callback p50 / p99 ms | holds | drained in s"
        " | CPU ms/event: web, worker, courier, beat, PostgreSQL, Redis, sink, sender |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        rounds = run.get("rounds") or ([run["at"]] if run["at"] else [])
        for n, at in enumerate(rounds, 1):
            for share, r in at.items():
                c, d, m = r["completed_ms"], r["callback_ms"], r["cpu_ms_per_event"]
                split = ", ".join(f"{m.get(k, 0):.2f}" for k in CPU_KINDS)
                lines.append(
                    f"{_scale(run)} | {run['sustained_per_s']:g} | {n} | {share}"
                    f" | {r['offered_per_s']} | {fmt(c['p50'])} / {fmt(c['p99'])}"
                    f" | {fmt(d['p50'])} / {fmt(d['p99'])} | {'yes' if r['holds'] else 'no'}"
                    f" | {fmt(r.get('drain_s'), '.1f')} | {split} |"
                )
        if not rounds:
            lines.append(f"{_scale(run)} | none held | | | | | | | | |")
    return "\n".join(lines)


def _overload_cells(o: dict[str, Any] | None) -> str:
    if o is None:
        return "| not run | | | | | | |"
    shed = f"{o['shed_503']}"
    if o["shed_503"]:
        ra = "all with Retry-After" if o["every_503_retry_after"] else "SOME WITHOUT Retry-After"
        shed += f" ({ra})"
    errors = ", ".join(f"{n} {cause}" for cause, n in o.get("errors", {}).items())
    failures = f"{o['failures']}" + (f" ({errors})" if errors else "")
    return (
        f"| {o['rate']:g} ({o['offered_per_s']:g}) | {o['admitted']} | {shed}"
        f" | {failures} | {fmt(o['recovered_s'], '.1f')} | {o['lost']} / "
        f"{o['doubled_events']} | {'yes' if o['graceful'] else 'no'} |"
    )


def runs_table(runs: list[dict[str, Any]]) -> str:
    """Per run: the held rate, whether every round held, and the overload's outcome."""
    lines = [
        "| web | worker | courier | held events/s | first not held | 50 % and 90 % held,"
        " every round | overload events/s (offered) | 2xx | 503 | failures"
        " | recovered in s | lost / doubled | graceful |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        rounds = len(run.get("rounds") or [])
        held = f"{'yes' if run.get('rounds_held') else 'no'} ({rounds} round{'s' * (rounds != 1)})"
        # "-": every rate held, so the overload was 1.5x the last rate, not past saturation
        lines.append(
            f"{_scale(run)} | {run['sustained_per_s']:g} | {fmt(run.get('first_failed_per_s'))}"
            f" | {held} {_overload_cells(run.get('overload'))}"
        )
    return "\n".join(lines)


def sweep_table(runs: list[dict[str, Any]]) -> str:
    return levels_table(runs) + "\n\n" + runs_table(runs)
