"""The store as the runner, drain and heartbeat see it: the queue's statements behind one object.

``SqlWorkStore`` is ``inbox.services.ports.WorkStore`` over PostgreSQL: ``begin`` is the
engine's transaction and every other method is a function of ``queue``, ``batch``,
``staleness`` or ``intents`` (the deliveries, and the callback intents they answer), called
with that transaction. Unit tests pass an in-memory store of the same shape instead
(``tests/unit/fake_store.py``).
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from sqlalchemy import Connection, Engine

from inbox.store.write import batch, intents, queue, staleness


class SqlWorkStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def begin(self) -> AbstractContextManager[Connection]:
        return self.engine.begin()

    claim = staticmethod(queue.claim)
    load = staticmethod(queue.load)
    load_many = staticmethod(batch.load_many)
    record_steps = staticmethod(queue.record_steps)
    record_many = staticmethod(batch.record_many)
    claim_effect = staticmethod(queue.claim_effect)
    judge = staticmethod(staleness.judge)
    enqueue_deliveries = staticmethod(intents.enqueue)  # intents, then deliveries
    complete = staticmethod(queue.complete)
    complete_many = staticmethod(batch.complete_many)
    fail = staticmethod(queue.fail)
    hold = staticmethod(queue.hold)
    extend = staticmethod(queue.extend)
    sweep_expired = staticmethod(queue.sweep_expired)
    due_count = staticmethod(queue.due_count)
