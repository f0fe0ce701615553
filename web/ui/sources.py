"""Sources: scheme, options, how many secrets verify (never the secrets), rate and errors."""

from __future__ import annotations

from flask import render_template

from inbox.services import reading
from web import actions
from web.ui.blueprint import ui
from web.ui.session import scope


@ui.get("/sources")
def sources() -> str:
    rows = reading.source_summaries(actions.runtime(), scope())
    return render_template("ui/sources.html", rows=rows)
