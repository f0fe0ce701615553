"""``inbox.testing``, the in-memory store users test their playbooks with, does not move.

Its exported names stay; importing it needs no database driver, broker or framework; the
how-to page's example runs as written; and a two-step playbook keeps its recovery point
across a crash between the steps.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import inbox
from inbox import Playbook, StepContext, testing
from inbox.domain import playbooks
from inbox.domain.playbooks import Registry
from inbox.testing import _data, deliveries, work

PUBLIC = {
    "InMemoryStore": work.InMemoryStore,
    "InMemoryDeliveries": deliveries.InMemoryDeliveries,
    "Row": _data.Row,
    "Delivery": _data.Delivery,
    "run_due": testing.run_due,
    "sweep": testing.sweep,
}
HOW_TO = Path(__file__).parents[2] / "docs" / "how-to" / "test-playbooks.md"


def test_every_exported_name_stays() -> None:
    assert set(testing.__all__) == set(PUBLIC)
    for name, obj in PUBLIC.items():
        assert getattr(testing, name) is obj, name


def test_importing_it_loads_no_driver_broker_or_framework() -> None:
    heavy = ["sqlalchemy", "psycopg", "celery", "kombu", "flask", "redis", "httpcore"]
    code = f"import sys, inbox.testing\nprint(','.join(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "", f"import inbox.testing pulled in {out}"


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> Registry:
    """``inbox.register`` and ``run_due`` on a registry of the test's own."""
    reg = Registry()
    reg.register(playbooks.record)
    monkeypatch.setattr(playbooks, "registry", reg)
    monkeypatch.setattr(inbox, "register", reg.register)
    return reg


def test_the_how_to_example_runs_as_written(fresh_registry: Registry) -> None:
    blocks = re.findall(r"```python\n(.*?)```", HOW_TO.read_text(), re.S)
    assert len(blocks) == 2
    namespace: dict[str, Any] = {"__name__": "test_orders"}
    exec(compile("\n".join(blocks), str(HOW_TO), "exec"), namespace)
    tests = sorted(name for name in namespace if name.startswith("test_"))
    assert tests == [
        "test_a_crash_after_the_charge_does_not_charge_twice",
        "test_an_order_is_charged_then_mailed",
    ]
    for name in tests:
        namespace[name]()
    assert "charge-then-mail" in fresh_registry.by_name


class Crash(BaseException):
    """The worker dies: nothing catches it, nothing more is written."""


def test_a_crash_between_two_steps_reruns_only_the_second(fresh_registry: Registry) -> None:
    runs: list[str] = []
    crash = [Crash()]
    pb = inbox.register(Playbook("reserve-then-ship"), event_type="order.placed")

    @pb.step("reserve")
    def reserve(ctx: StepContext) -> dict[str, Any]:
        runs.append("reserve")
        return {"reserved": ctx.payload["sku"]}

    @pb.step("ship")
    def ship(ctx: StepContext) -> dict[str, Any]:
        runs.append("ship")
        if crash:
            raise crash.pop()
        return {"shipped": ctx.results["reserve"]["reserved"]}

    store = testing.InMemoryStore()
    event_id = store.add_event(b'{"sku": "A-1"}', event_type="order.placed")
    with pytest.raises(Crash):
        testing.run_due(store)
    row = store.event(event_id)
    assert (row.state, row.steps) == ("processing", {"reserve": {"reserved": "A-1"}})
    assert testing.run_due(store) == []  # still leased to the dead worker
    store.advance(59)
    assert testing.sweep(store) == (0, 0)  # the lease lasts 60 s from the last commit
    store.advance(1)
    assert testing.sweep(store) == (1, 0)
    assert testing.run_due(store) == ["completed"]
    assert runs == ["reserve", "ship", "ship"]
    row = store.event(event_id)
    assert row.steps == {"reserve": {"reserved": "A-1"}, "ship": {"shipped": "A-1"}}
    assert (row.state, row.attempts, row.decision) == ("completed", 2, {"shipped": "A-1"})
