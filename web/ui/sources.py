"""Sources: scheme, options, how many secrets verify (never the secrets), rate and errors."""

from __future__ import annotations

from flask import render_template

from inbox.store.reads import sources as source_reads
from web.services import services
from web.ui.blueprint import ui
from web.ui.session import scope


@ui.get("/sources")
def sources() -> str:
    with services().engine.connect() as conn:
        rows = source_reads.summaries(conn, scope())
    return render_template("ui/sources.html", rows=rows)
