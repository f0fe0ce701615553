"""The replay planner's pure part: declared callbacks, the event's own type, endpoints'
type filters, and a step that declares nothing."""

from __future__ import annotations

from typing import Any

from inbox.domain.playbooks import Playbook, StepContext, forward
from inbox.services.preview import RUN, SKIP, Inputs, Preview, plan_event
from inbox.store.reads.preview import EndpointRow, PlannedEvent


def event(event_type: str | None, steps: dict[str, Any] | None = None) -> PlannedEvent:
    return PlannedEvent(
        id=1,
        public_id="evt_1",
        tenant_id=1,
        tenant="acme",
        source="billing",
        source_options={},
        event_type=event_type,
        business_key_digest=None,
        content_type="application/json",
        body=b"{}",
        state="quarantined",
        replay=2,
        steps=steps or {},
    )


ENDPOINTS = [
    EndpointRow(1, "ep_all", None),
    EndpointRow(2, "ep_invoices", ["invoice.paid"]),
]


def test_forward_sends_the_events_own_type_to_the_endpoints_that_take_it() -> None:
    plan = plan_event(event("invoice.paid"), forward, Inputs(None, {}, ENDPOINTS))
    assert [(s.name, s.action, s.sends) for s in plan.steps] == [("forward", RUN, ["invoice.paid"])]
    assert {(c.endpoint, c.event_type, c.replay) for c in plan.callbacks} == {
        ("ep_all", "invoice.paid", 3),
        ("ep_invoices", "invoice.paid", 3),
    }
    untyped = plan_event(event(None), forward, Inputs(None, {}, ENDPOINTS))
    assert [(c.endpoint, c.event_type) for c in untyped.callbacks] == [("ep_all", "event")]


def test_a_step_that_declares_nothing_runs_with_unknown_callbacks() -> None:
    pb = Playbook("p")

    @pb.step("quiet", sends=())
    def quiet(ctx: StepContext) -> None:
        return None

    @pb.step("chatty")
    def chatty(ctx: StepContext) -> None:
        ctx.send("x", {})

    plan = plan_event(event("t", {"quiet": {}}), pb, Inputs(None, {}, ENDPOINTS))
    assert [(s.name, s.action, s.sends) for s in plan.steps] == [
        ("quiet", SKIP, None),
        ("chatty", RUN, None),
    ]
    totals = Preview([plan], 1).totals
    assert (totals["skip"], totals["run"], totals["callbacks"]) == (1, 1, 0)
    assert totals["unknown_callbacks"] == 1
