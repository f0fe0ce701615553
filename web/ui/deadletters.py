"""Dead letters grouped by cause: quarantined events by source, type and error class,
failed deliveries by endpoint, type and error; each group replays through bulk replay."""

from __future__ import annotations

from flask import redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from inbox.store.reads import deliveries as delivery_reads
from inbox.store.reads import events as event_reads
from inbox.store.reads import lanes as lreads
from inbox.store.reads import search as search_reads
from web.services import services
from web.ui.blueprint import ui
from web.ui.session import scope


@ui.get("/dead-letters")
def dead_letters() -> str:
    with services().engine.connect() as conn:
        groups = event_reads.dead_letter_groups(conn, scope())
        deliveries = delivery_reads.failed_delivery_groups(conn, scope())
        lanes = lreads.blocked(conn, scope())
    return render_template(
        "ui/dead_letters.html", groups=groups, deliveries=deliveries, lanes=lanes
    )


@ui.get("/search")
def search() -> str | Response:
    """One box for an event id, a delivery id, an Idempotency-Key or a provider event id."""
    q = request.args.get("q", "").strip()[:300]
    hits: list[search_reads.Hit] = []
    if q:
        with services().engine.connect() as conn:
            hits = search_reads.search(conn, q, scope())
    if len(hits) == 1:
        h = hits[0]
        view = "ui.event" if h.kind == "event" else "ui.delivery"
        return redirect(url_for(view, public_id=h.public_id))
    return render_template("ui/search.html", q=q, hits=hits)
