"""Test playbooks without PostgreSQL: the store's ports in memory.

docs/how-to/test-playbooks.md shows a playbook tested end to end.

``InMemoryStore`` is the event queue (``inbox.services.ports.WorkStore``) and its
``deliveries`` the outbox (``DeliveryStore``), with the rules the PostgreSQL store keeps:
leases and fences, recovery points written once, retries and quarantine, effects once per
business key, deliveries once per step and endpoint. The project's contract suites run the
same scenarios against both, so a rule the fake gets wrong fails there. Its clock only moves
when a test calls ``advance``::

    from inbox.testing import InMemoryStore, run_due

    store = InMemoryStore()
    event_id = store.add_event(b'{"amount": 42}', event_type="order.paid")
    assert run_due(store) == ["completed"]
    assert store.event(event_id).steps == {"charge": {"charged": 42}, ...}

The names in ``__all__`` are stable (``tests/unit/test_testing_api.py`` fails if one goes);
the modules behind them may move.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from inbox.domain import playbooks as _playbooks
from inbox.domain.playbooks import Registry
from inbox.testing._data import Delivery, Row
from inbox.testing.deliveries import InMemoryDeliveries
from inbox.testing.work import InMemoryStore

if TYPE_CHECKING:
    from inbox.services.ports import DeliveryStore, WorkStore
    from inbox.services.runner import RunConfig
    from inbox.testing._data import Memory

    def _ports(s: InMemoryStore) -> tuple[WorkStore[Memory], DeliveryStore[Memory]]:
        return s, s.deliveries  # mypy: the fakes have the ports' shape


__all__ = ["Delivery", "InMemoryDeliveries", "InMemoryStore", "Row", "run_due", "sweep"]


def run_due(
    store: InMemoryStore,
    playbooks: Registry | None = None,
    config: RunConfig | None = None,
    owner: str = "test-worker",
) -> list[str]:
    """Claim every event due now and run each through its playbook, as a worker does
    (``inbox.services.runner.run_claimed``); what became of each, in claim order:
    ``completed``, ``received`` (a retry, due after its backoff), ``quarantined``, ``held``.

    ``playbooks``: the registry to resolve from; by default the one ``inbox.register``
    files into.
    """
    from inbox.services.runner import RunConfig, run_claimed

    cfg = config or RunConfig()
    reg = playbooks if playbooks is not None else _playbooks.registry
    with store.begin() as tx:
        claims = store.claim(tx, owner, 1_000, cfg.lease_seconds)
    return [run_claimed(store, c, cfg, reg) for c in claims]


def sweep(store: InMemoryStore) -> tuple[int, int]:
    """What the sweeper does after a crash: events whose lease expired go back to the queue
    (quarantined when out of attempts); returns (requeued, quarantined)."""
    with store.begin() as tx:
        return store.sweep_expired(tx)
