"""Receiving a webhook: the use case behind ``POST /hooks/<tenant>/<source>``.

The view parses, authenticates and prepares the request (``inbox.domain.intake``); the
rest happens here, in this order:

1. **Claim** the key and store the event, in one committed statement shared with the
   process's concurrent claims (``inbox.store.db.group_commit``). A copy of an earlier
   delivery is answered by the same statement, with the stored answer.
2. A key **taken** otherwise: a synchronous source's copy (its stored answer, or 409 while
   the original is in flight), another body (422, kept), a key pruned in between (claimed
   afresh) (``inbox.store.write.intake.taken``).
3. Both in **one retry loop**: a deadlock victim or a serialization failure
   (``Contended``) is sent again, at most ``ATTEMPTS`` times, within the request's
   deadline. Nothing below retries: a batched statement that fails fails all of its
   claims, and each comes back through here.
4. Committed: only now may the sender hear 2xx. **Ring** the doorbell (best effort: the
   sweeper re-rings).
5. ``Prefer: wait=N``: **wait for the decision** without holding a connection. The
   process's one listener (``inbox.store.db.listener``) wakes the request when the
   transaction that finishes the event commits (its NOTIFY); the request then reads the
   stored row, which is the truth, and reads it once more when the wait ends (a NOTIFY
   can be missed). Where no LISTEN is possible (PgBouncer in transaction mode without a
   direct URL), the request polls, with growing pauses.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from sqlalchemy import Engine

from inbox.domain.errors import StoreUnavailable
from inbox.domain.intake import Prepared
from inbox.domain.outcomes import IngestOutcome
from inbox.domain.records import Source
from inbox.domain.states import EventState
from inbox.infra import metrics, tracing
from inbox.infra.config import Settings
from inbox.store.db import listener as listeners
from inbox.store.db import sealing
from inbox.store.db.claims import Claimed
from inbox.store.db.engine import deadline_at
from inbox.store.db.errors import Contended, wrap_exceptions
from inbox.store.db.group_commit import Claims
from inbox.store.reads.events import stored_response
from inbox.store.write.intake import IngestResult, claim, taken

__all__ = ["ATTEMPTS", "ClaimQueue", "IngestResult", "Intake", "claim_queue", "deadline"]

log = logging.getLogger(__name__)

ATTEMPTS = 3  # a claim rolled back by a deadlock or serialization failure: tries in all
POLL_S = (0.05, 1.0)  # without a listener: the first pause between reads, and the longest


class ClaimQueue(Protocol):
    """The process's claims (``inbox.store.db.group_commit.Claims``)."""

    def claim(self, source: Source, ev: Prepared) -> Claimed | None: ...


def claim_queue(engine: Engine, settings: Settings) -> ClaimQueue:
    """A web process's claims: its threads' claiming statements group-committed."""
    return Claims(
        engine,
        timeout_s=settings.db_timeout_ms / 1000,
        max_statements=settings.claim_statements,
        counted=metrics.record_claims,
    )


def deadline(until: float) -> contextlib.AbstractContextManager[float]:
    """Every database wait inside (the pool, each statement, the claims' queue) ends by
    ``until`` (``time.monotonic()``); past it the store raises ``StoreUnavailable``."""
    return deadline_at(until)


@dataclass
class Intake:
    """The receive use case for one app: its settings, engine, claims and doorbell."""

    settings: Settings
    engine: Engine
    claims: ClaimQueue
    doorbell: Callable[[], None]
    retries: int = 0  # claims sent again after a deadlock or serialization failure
    _listener: listeners.Listener | None = field(default=None, repr=False)
    _listener_known: bool = field(default=False, repr=False)
    _keys: sealing.PayloadKeys | None = field(default=None, repr=False)

    def receive(self, source: Source, ev: Prepared, until: float) -> IngestResult:
        """Store the event (or answer its copy), then ring and, if asked, wait; every
        database wait of the claim ends by ``until``."""
        since = time.monotonic()  # a decision committed after this is one to hear of
        # Sealed once, before the claim (and its retries): one AEAD call per column, with
        # the tenant's (or subject's) key from the process's cache; the digests stay the
        # plaintext's, taken in ``prepare``.
        keys = self._keys
        if keys is None:
            keys = self._keys = sealing.for_engine(self.engine)
        if keys.enabled:
            with deadline_at(until), wrap_exceptions():
                ev = keys.seal(source.tenant_id, ev)
        # The claim's span context is what the event stores (the claim reads it): its
        # trace continues in the worker and the courier. None, at no cost, while off.
        with tracing.span("inbox.claim") as current, deadline_at(until):
            result = self._claim(source, ev, until)
            if current is not None:
                current.set_attributes(_claim_attributes(source, result))
        if result.outcome is not IngestOutcome.ACCEPTED:
            return result
        if ev.filter_reason is not None:
            # Stored as filtered: answered as accepted, never run: no doorbell, no wait.
            metrics.record_filtered(source.tenant, source.name)
            return result
        self._ring()
        if ev.wait_seconds:
            return self.wait_for_decision(result, ev.wait_seconds, since)
        return result

    def _claim(self, source: Source, ev: Prepared, until: float) -> IngestResult:
        """The claim, else the taken key's answer: the one retry loop."""
        for attempt in range(1, ATTEMPTS + 1):
            try:
                with wrap_exceptions():
                    # counted by the claims, per statement
                    result = claim(self.claims, source, ev)
                    if result is not None:
                        return result
                    result = taken(self.engine, source, ev, until)
                metrics.record_ingest(source.tenant, source.name, result.outcome)
                return result
            except Contended as exc:
                if attempt == ATTEMPTS or time.monotonic() >= until:
                    raise
                self.retries += 1
                below = type(exc.__cause__ or exc).__name__
                log.warning(
                    "claim sent again after %s",
                    below,
                    extra={"error_class": below, "outcome": "retry"},
                )
        raise AssertionError("unreachable")  # pragma: no cover

    def _ring(self) -> None:
        try:
            self.doorbell()
        except Exception as exc:  # the sweeper re-rings; never fail an accepted event
            log.warning(
                "doorbell failed: %s",
                type(exc).__name__,
                extra={"error_class": type(exc).__name__},
            )

    def wait_for_decision(self, result: IngestResult, seconds: float, since: float) -> IngestResult:
        """``Prefer: wait=N``: the decision, if the event is decided within ``seconds``;
        else the accepted answer. ``since``: when the claim was sent."""
        until = time.monotonic() + seconds
        listener = self.listener()
        if listener is None:
            return self._poll(result, until)
        with listener.watching(result.public_id, since) as watch:
            while watch.wait(until):  # its NOTIFY, or a read due after a (re)connect
                decided = self._decided(result)
                if decided is not None:
                    return decided
        return self._decided(result) or result  # the last read: a NOTIFY can be missed

    def listener(self) -> listeners.Listener | None:
        """The process's listener for this engine (None: poll; see ``for_engine``)."""
        if not self._listener_known:
            self._listener = listeners.for_engine(self.engine, self.settings)
            self._listener_known = True
        return self._listener

    def _poll(self, result: IngestResult, until: float) -> IngestResult:
        """No listener: read the stored state after growing pauses (at most about
        log2(1 s / 50 ms) + N reads for wait=N)."""
        pause = POLL_S[0]
        while True:
            time.sleep(max(0.0, min(pause, until - time.monotonic())))
            pause = min(pause * 2, POLL_S[1])
            decided = self._decided(result)
            if decided is not None:
                return decided
            if time.monotonic() >= until:
                return result

    def _decided(self, result: IngestResult) -> IngestResult | None:
        """The answer once the event is decided (completed: its decision; quarantined: the
        accepted answer), from the stored row; None while it is not. A store that fails
        here answers as accepted: the event is committed, the sender must not retry."""
        try:
            with wrap_exceptions(), deadline_at(time.monotonic() + self._timeout_s):
                with self.engine.connect() as conn:
                    stored = stored_response(conn, result.event_id)
        except StoreUnavailable as exc:
            below = type(exc.__cause__ or exc).__name__
            log.warning(
                "decision not read: %s",
                below,
                extra={"error_class": below, "outcome": "accepted"},
            )
            return result
        if stored.state == EventState.COMPLETED:
            return replace(result, status=stored.status, body=stored.body)
        if stored.state == EventState.QUARANTINED:
            return result
        return None

    @property
    def _timeout_s(self) -> float:
        return self.settings.db_timeout_ms / 1000


def _claim_attributes(route: Source, result: IngestResult) -> dict[str, str | int | bool]:
    return {
        "inbox.tenant": route.tenant,
        "inbox.source": route.name,
        "inbox.event_id": result.public_id,
        "inbox.outcome": result.outcome,  # accepted | duplicate | conflict | in_flight
        "inbox.duplicate": result.outcome is not IngestOutcome.ACCEPTED,
        "db.system": "postgresql",
        "db.operation": "INSERT",
    }
