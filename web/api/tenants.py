"""``/api/v1/tenants/<name>``: a tenant's fairness settings (in-flight cap and weight).

Reading needs a token that sees the tenant; changing them an all-tenants operator token:
one tenant's share is taken from the others'."""

from __future__ import annotations

from typing import Any

from inbox.domain.errors import Forbidden, NotFound
from inbox.domain.records import Tenant
from inbox.services import admin
from web import actions
from web.api import auth, bodies
from web.api.blueprint import api


def _public(t: Tenant) -> dict[str, Any]:
    return {
        "name": t.name,
        "disabled": t.disabled,
        "max_in_flight": t.max_in_flight,
        "weight": t.weight,
    }


def _visible(name: str) -> Tenant:
    scope = auth.scope()
    for t in admin.tenant_settings(actions.runtime(), name):
        if scope is None or t.id == scope:
            return t
    raise NotFound(f"No tenant {name!r}.")


@api.get("/tenants/<name>")
def get_tenant(name: str) -> dict[str, Any]:
    """The tenant's in-flight cap (null: none) and claim weight."""
    return _public(_visible(name))


@api.patch("/tenants/<name>")
def set_tenant_fairness(name: str) -> dict[str, Any]:
    """``{"max_in_flight": N or null, "weight": W}`` (either): at most N of the tenant's
    events run at once (null: no cap); W (1-100) is its share of each claim against the
    other tenants' weights. An all-tenants operator token only."""
    _visible(name)
    if auth.scope() is not None:
        raise Forbidden("Only an all-tenants token may change a tenant's share of the workers.")
    body = bodies.load(bodies.Fairness)
    cap = body.get("max_in_flight")
    weight = body.get("weight")
    no_cap = "max_in_flight" in body and cap is None
    t = admin.set_fairness(actions.runtime(), name, cap, weight, no_cap=no_cap)
    return _public(t)
