"""A playbook for the tracing tests: a recovery point, a retry, a callback.

Loaded by workers through ``INBOX_PLAYBOOKS=tests.trace_playbooks``.
"""

from __future__ import annotations

from typing import Any

from inbox.domain.playbooks import Playbook, StepContext, register

traced = register(Playbook("traced"), event_type="traced")


@traced.step("check")
def check(ctx: StepContext) -> dict[str, Any]:
    """An effect step: its result is a recovery point, so a retry skips it."""
    return {"account": ctx.payload.get("account")}


@traced.step("charge")
def charge(ctx: StepContext) -> dict[str, Any]:
    """Fails its first ``fail_times`` attempts (retried by the backoff)."""
    if ctx.event.attempt <= ctx.payload.get("fail_times", 0):
        raise RuntimeError(f"charge attempt {ctx.event.attempt} fails")
    return {"charged": True}


@traced.step("tell")
def tell(ctx: StepContext) -> dict[str, Any]:
    """The callback to the tenant's endpoints."""
    ctx.send("charge.done", {"account": ctx.payload.get("account")})
    return {"told": True}
