"""The playbook API: named steps run in order, each result a recovery point.

    from inbox import Playbook, register

    deny = Playbook("deny-account")

    @deny.step("lookup", effect=False)
    def lookup(ctx):
        return {"account": ctx.payload["account"]["id"]}

    @deny.step("lock", once_per_business_key=True)
    def lock(ctx):
        fraud_api.lock(ctx.results["lookup"]["account"], idempotency_key=ctx.step_key)
        return {"locked": True}

    register(deny, event_type="sim.swap")

A step's return value (JSON-serialisable) is committed when the step completes; on
any retry or replay, completed steps are skipped and their results are handed back
in ``ctx.results``. ``ctx.step_key`` is the same on every attempt of a step: pass it
to any outside system. ``effect=False`` marks a step with no outside effect, whose
result may be committed together with the next one. ``once_per_business_key``
makes the step's effect happen once per business fact: a second event with the
same business key completes without repeating it (outcome ``duplicate_fact``).
``skip_if_stale`` skips the step for an event older than the newest completed
event with its business key (outcome ``stale``; see ``inbox.domain.ordering``):
``ctx.newer`` names that event, ``ctx.replay`` is 0, or the replay number.
``sends`` names the callback types a step may send (``EVENT_TYPE`` stands for the
event's own type): a replay's preview lists them without running the step.

Pure: imports no framework or driver.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from inbox.domain.callbacks import Outgoing
from inbox.domain.errors import PermanentError, PlaybookMissing
from inbox.domain.ordering import Newer

StepFn = Callable[["StepContext"], Any]
# In a step's ``sends``: the callback carries the event's own type (or "event").
EVENT_TYPE = "{event_type}"


@dataclass(frozen=True)
class EventView:
    """What a playbook sees of an event."""

    id: int
    public_id: str
    tenant: str
    source: str
    event_type: str | None
    content_type: str
    body: bytes
    attempt: int
    # 0 for the original processing; N for the event's N-th operator replay.
    replay: int = 0

    @property
    def payload(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError as exc:
            raise PermanentError("The body is not JSON.") from exc


@dataclass
class StepContext:
    event: EventView
    step: str
    results: dict[str, Any]
    outbox: list[Outgoing] = field(default_factory=list)
    # A newer completed event with the same business key (its public id and time or
    # version), when the source names occurred_at_path or version_path; else None.
    newer: Newer | None = None
    # The step's declared callback types (Step.sends); None: undeclared, anything goes.
    sends: tuple[str, ...] | None = None

    def send(self, event_type: str, data: Any) -> None:
        """Queue a callback to the tenant's endpoints. It is written in the same
        transaction as this step's result, with a delivery id stable across retries.

        A step that declares its callbacks may send only those: a replay's preview
        promised no others."""
        if self.sends is not None:
            own = self.event.event_type or "event"
            if event_type not in {own if t == EVENT_TYPE else t for t in self.sends}:
                raise PermanentError(
                    f"step {self.step!r} sends {event_type!r}, which its sends= does not name"
                )
        self.outbox.append(Outgoing(event_type, data, datetime.now(UTC)))

    @property
    def replay(self) -> int:
        """0 for the original processing, N while the event's N-th replay runs. The
        step key does not change with it: a replayed step is the same step."""
        return self.event.replay

    @property
    def step_key(self) -> str:
        """Stable across retries and replays: derived from our own ids only."""
        return f"{self.event.public_id}.{self.step}"

    @property
    def payload(self) -> Any:
        return self.event.payload


@dataclass(frozen=True)
class Step:
    name: str
    fn: StepFn
    effect: bool = True
    once_per_business_key: bool = False
    skip_if_stale: bool = False
    # The callback types the step may send; None when the step does not say.
    sends: tuple[str, ...] | None = None


@dataclass
class Playbook:
    name: str
    steps: list[Step] = field(default_factory=list)
    # Exceptions that no retry can fix: the event is quarantined at once.
    permanent: tuple[type[BaseException], ...] = ()

    def step(
        self,
        name: str,
        *,
        effect: bool = True,
        once_per_business_key: bool = False,
        skip_if_stale: bool = False,
        sends: tuple[str, ...] | None = None,
    ) -> Callable[[StepFn], StepFn]:
        if any(s.name == name for s in self.steps):
            raise ValueError(f"playbook {self.name!r} already has a step {name!r}")

        def add(fn: StepFn) -> StepFn:
            self.steps.append(Step(name, fn, effect, once_per_business_key, skip_if_stale, sends))
            return fn

        return add

    def is_permanent(self, exc: BaseException) -> bool:
        return isinstance(exc, PermanentError) or isinstance(exc, self.permanent)


@dataclass(frozen=True)
class _Rule:
    playbook: Playbook
    event_type: str
    tenant: str | None
    source: str | None

    def specificity(self) -> int:
        return (
            (4 if self.source else 0)
            + (2 if self.tenant else 0)
            + (1 if self.event_type != "*" else 0)
        )


class Registry:
    def __init__(self) -> None:
        self._rules: list[_Rule] = []
        self.by_name: dict[str, Playbook] = {}
        # The module that registered each playbook (inbox.services.playbooks.load).
        self.origins: dict[str, str] = {}

    def register(
        self,
        playbook: Playbook,
        event_type: str = "*",
        tenant: str | None = None,
        source: str | None = None,
    ) -> Playbook:
        self.by_name[playbook.name] = playbook
        self._rules.append(_Rule(playbook, event_type, tenant, source))
        return playbook

    def resolve(
        self, tenant: str, source: str, event_type: str | None, named: str | None = None
    ) -> Playbook:
        """The source's named playbook, else the most specific rule, else ``record``."""
        if named:
            if named not in self.by_name:
                raise PlaybookMissing(named)
            return self.by_name[named]
        matches = [
            r
            for r in self._rules
            if r.event_type in ("*", event_type)
            and r.tenant in (None, tenant)
            and r.source in (None, source)
        ]
        if matches:
            return max(matches, key=_Rule.specificity).playbook
        return self.by_name["record"]


registry = Registry()
register = registry.register

# Built-in playbooks.
record = Playbook("record")


@record.step("record", effect=False, sends=())
def _record(ctx: StepContext) -> dict[str, Any]:
    return {"decision": "recorded", "event_type": ctx.event.event_type}


forward = Playbook("forward")


@forward.step("forward", sends=(EVENT_TYPE,))
def _forward(ctx: StepContext) -> dict[str, Any]:
    ctx.send(ctx.event.event_type or "event", ctx.payload)
    return {"decision": "forwarded"}


registry.by_name["record"] = record
registry.by_name["forward"] = forward
