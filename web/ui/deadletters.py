"""Dead letters grouped by cause: quarantined events by source, type and error class,
failed deliveries by endpoint, type and error; each group replays through bulk replay."""

from __future__ import annotations

from flask import redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from inbox.services import reading
from inbox.store.reads import search as search_reads
from web import actions
from web.ui.blueprint import ui
from web.ui.session import scope


@ui.get("/dead-letters")
def dead_letters() -> str:
    found = reading.dead_letters(actions.runtime(), scope())
    return render_template(
        "ui/dead_letters.html", groups=found.groups, deliveries=found.deliveries, lanes=found.lanes
    )


@ui.get("/search")
def search() -> str | Response:
    """One box for an event id, a delivery id, an Idempotency-Key or a provider event id."""
    q = request.args.get("q", "").strip()[:300]
    hits: list[search_reads.Hit] = []
    if q:
        hits = reading.search(actions.runtime(), q, scope())
    if len(hits) == 1:
        h = hits[0]
        view = "ui.event" if h.kind == "event" else "ui.delivery"
        return redirect(url_for(view, public_id=h.public_id))
    return render_template("ui/search.html", q=q, hits=hits)
