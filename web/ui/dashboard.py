"""The dashboard: what is waiting now, and each measure over the last hour or day."""

from __future__ import annotations

from dataclasses import dataclass

from flask import redirect, render_template, request, url_for
from markupsafe import Markup
from werkzeug.wrappers import Response

from inbox.domain.errors import BadRequest
from inbox.services import reading
from inbox.store.reads import dashboard as store
from web import actions
from web.ui import charts, outcomes
from web.ui.blueprint import ui
from web.ui.display import duration
from web.ui.session import current, scope

# (measure, title) drawn as bars; then the stacked attempts; then the lines.
BARS = (
    ("accepted", "Accepted events"),
    ("duplicates", "Duplicates"),
    ("conflicts", "Conflicts (same key, another body)"),
    ("quarantined", "Quarantined (dead letters)"),
    ("completed", "Completed"),
)
ATTEMPTS = (
    ("ok", "2xx", "attempts_2xx"),
    ("client", "3xx/4xx", "attempts_4xx"),
    ("server", "5xx", "attempts_5xx"),
    ("neterr", "no answer", "attempts_error"),
)


@dataclass(frozen=True)
class Chart:
    name: str
    title: str
    svg: Markup
    summary: str
    legend: tuple[tuple[str, str], ...] = ()


def _labels(s: store.Series) -> list[str]:
    fmt = "%H:%M" if s.window.step_seconds < 3600 else "%d %b %H:00"
    return [s.bucket_start(k).strftime(fmt) + " UTC" for k in range(s.window.buckets)]


def _peak(values: list[float]) -> float:
    return max(values, default=0)


def _charts(s: store.Series) -> list[Chart]:
    labels, v = _labels(s), s.values
    out = [
        Chart(
            m,
            title,
            charts.bars(m, title, v[m], labels),
            f"{s.total(m):.0f} in all · peak {_peak(v[m]):.0f}",
        )
        for m, title in BARS
    ]
    layers = [(css, legend, v[m]) for css, legend, m in ATTEMPTS]
    total = sum(s.total(m) for _, _, m in ATTEMPTS)
    out.append(
        Chart(
            "attempts",
            "Outbound attempts by outcome",
            charts.stacked("attempts", "Outbound attempts by outcome", layers, labels),
            f"{total:.0f} in all",
            tuple((css, legend) for css, legend, _ in ATTEMPTS),
        )
    )
    depth, age = v["depth"], v["oldest_age_seconds"]
    title = "Inbox depth (received + processing)"
    out.append(
        Chart(
            "depth",
            title,
            charts.line("depth", title, depth, labels),
            f"now {depth[-1]:.0f} · peak {_peak(depth):.0f}",
        )
    )
    title = "Oldest pending event's age"
    out.append(
        Chart(
            "oldest_age_seconds",
            title,
            charts.line("oldest_age_seconds", title, age, labels, duration),
            f"now {duration(age[-1])} · peak {duration(_peak(age))}",
        )
    )
    return out


@ui.get("/")
def home() -> Response:
    return redirect(url_for("ui.dashboard"))


@ui.get("/dashboard")
def dashboard() -> str:
    name = request.args.get("window", "hour")
    window = store.WINDOWS.get(name)
    if window is None:
        raise BadRequest(f"window must be one of {', '.join(store.WINDOWS)}")
    found = reading.dashboard(actions.runtime(), window, scope(), current().tenant)
    s, tiles = found.series, found.tiles
    jobs = [(job, outcomes.shown(job, done)) for job, done in found.jobs]
    labels = _labels(s)
    return render_template(
        "ui/dashboard.html",
        window=window,
        windows=store.WINDOWS,
        series=s,
        charts=_charts(s),
        first=labels[0],
        last=labels[-1],
        tiles=tiles,
        jobs=jobs,
    )
