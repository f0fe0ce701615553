"""Template filters: times in UTC, durations, JSON for reading."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from web.ui.blueprint import ui


@ui.app_template_filter("when")
def when(value: datetime | None) -> str:
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@ui.app_template_filter("duration")
def duration(seconds: float | None) -> str:
    """``3 h 05 m``, ``4 m 20 s``, ``12 s``."""
    if seconds is None:
        return "—"
    s = max(0, int(seconds))
    if s >= 86400:
        return f"{s // 86400} d {s % 86400 // 3600:02d} h"
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} m"
    if s >= 60:
        return f"{s // 60} m {s % 60:02d} s"
    return f"{s} s"


@ui.app_template_filter("pretty")
def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str, ensure_ascii=False)


def pretty_body(body: str | None, content_type: str) -> str | None:
    """The body as indented JSON when it is JSON, else None."""
    if body is None or "json" not in content_type:
        return None
    try:
        return pretty(json.loads(body))
    except ValueError:
        return None
