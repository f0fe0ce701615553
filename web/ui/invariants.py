"""Invariants: each open violation the self-audit found, with the rows it names and what
the invariant means; a safe repair proposed here runs only when a second operator approves
it (``inbox.services.audit``). Violations span tenants: a tenant-scoped token may not
see them."""

from __future__ import annotations

from flask import flash, redirect, render_template, url_for
from werkzeug.wrappers import Response

from inbox.domain.errors import Forbidden
from inbox.domain.invariants import MEANING, Invariant, repair_of
from inbox.services import audit
from web import actions
from web.ui.blueprint import ui
from web.ui.session import current, scope


def _unscoped() -> None:
    if scope() is not None:
        raise Forbidden("Invariant violations span tenants: a tenant's token may not see them.")


@ui.get("/invariants")
def invariants() -> str:
    _unscoped()
    rt = actions.runtime()
    rows = audit.open_violations(rt)
    return render_template(
        "ui/invariants.html",
        rows=rows,
        pending=audit.pending_repairs(rt),
        meaning={i.value: MEANING[i] for i in Invariant},
        repairable={v.id for v in rows if repair_of(v.invariant, v.subject, v.rows)},
        me=current().name,
    )


@ui.post("/invariants/<int:violation_id>/repair")
def propose_repair(violation_id: int) -> Response:
    _unscoped()
    rt = actions.runtime()
    repair = audit.propose(rt, current().name, violation_id)
    flash(f"Repair {repair.public_id} proposed: another operator must approve it.")
    return redirect(url_for("ui.invariants"))


@ui.post("/invariants/repairs/<public_id>/<verdict>")
def review_repair(public_id: str, verdict: str) -> Response:
    _unscoped()
    if verdict not in ("approve", "reject"):
        raise Forbidden("A repair is approved or rejected.")
    rt = actions.runtime()
    done = audit.review(rt, current().name, public_id, verdict == "approve")
    if verdict == "reject":
        flash(f"Repair {public_id} rejected: it will not run.")
    elif (done.result or {}).get("holds_after"):
        flash(f"Repair {public_id} applied; checked again, the violation is gone.")
    else:
        flash(f"Repair {public_id} applied, but checked again the violation is still there.")
    return redirect(url_for("ui.invariants"))
