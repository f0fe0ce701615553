"""Group commit: concurrent claims of one process share one claiming INSERT.

When several threads of one receiver process claim at the same time, ``Claims`` sends
their rows as one multi-row statement (``inbox.store.db.claims``): one round trip and one
commit for all of them, instead of one each. Nobody waits for company: the first thread
runs its row alone at once; whoever arrives while that statement is out queues, and the
next statement takes the whole queue. A request is answered only from its own row's
outcome, after the statement that carried it has committed, so the contract is the same
as for a claim of its own.

Rows whose key is already in the statement wait for the next one (two rows with one key
in one INSERT would leave it to row order which copy wins; one at a time, PostgreSQL
decides, as it does across processes). A row that PostgreSQL refuses (bad data, a
source deleted meanwhile) fails only itself: the others are retried one by one. A
statement chosen as a deadlock victim fails every claim it carried, with the driver's
error: each request's service sends its claim again (``inbox.services.intake``, the one
retry loop), and those that come back together share the next statement.
Every wait in the queue ends by the request's deadline, as the statement's does.

A committed statement's outcomes (accepted, copies) are counted once per statement
(``counted``, the receiver's metrics), before any of its claimants is answered.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import psycopg
from sqlalchemy import Engine

from inbox.domain.intake import Prepared
from inbox.domain.outcomes import IngestOutcome
from inbox.domain.records import Source
from inbox.store.db.claim_connections import for_engine
from inbox.store.db.claims import MAX_ROWS, Claimed, ClaimTimeout, Copy, row
from inbox.store.db.engine import DEFAULT_TIMEOUT_S, current_deadline, deadline_at

log = logging.getLogger(__name__)

# Statements one process may have out at once (INBOX_CLAIM_STATEMENTS). With more than one,
# a statement goes out while another waits for its commit, and PostgreSQL flushes their
# WAL together; copies of a key in two of them wait on each other as they would across
# processes, and the lock order keeps that from closing a circle. One is the default: on
# the 2-core benchmark machine two did not do better (bench/README.md).
STATEMENTS = 1


def _own_copy(error: BaseException) -> BaseException:
    """A copy of a failed statement's error for one of the claims it carried: each thread
    raises an object of its own, instead of all of them growing one shared traceback.
    The copy has no traceback yet and keeps the driver's details (sqlstate, diag)."""
    try:
        return copy.copy(error)
    except Exception:  # cannot be copied: the shared object, rather than a new failure
        return error


class _Ticket:
    """One waiting claim. ``wake`` is held until the thread may go on."""

    __slots__ = (
        "alone",
        "error",
        "event_id",
        "key",
        "label",
        "lead",
        "public_id",
        "row",
        "until",
        "wake",
    )

    def __init__(
        self, row: tuple[Any, ...], key: tuple[Any, ...] | None, until: float, label: Label
    ) -> None:
        self.row = row
        self.label = label
        self.key = key
        self.until = until
        self.public_id: str = row[0]
        self.wake = threading.Lock()
        self.wake.acquire()
        self.lead = False  # woken to run the next statement
        self.alone = False  # woken to retry in a statement of its own
        self.event_id: Claimed | None = None
        self.error: BaseException | None = None


# A claim's (tenant, source) names, for the counts.
Label = tuple[str, str]
# Told, before the requests hear of it, how many claims of a statement were accepted and
# how many were copies, by (outcome, tenant, source): ``inbox.infra.metrics``' counters,
# bumped once per statement and label instead of once per request.
Counted = Callable[[dict[tuple[IngestOutcome, str, str], int]], None]

# Runs one claiming INSERT for the rows, committed by the current deadline
# (``inbox.store.db.engine.deadline``); the public ids that went in.
Send = Callable[[list[tuple[Any, ...]]], dict[str, Claimed]]


class Claims:
    """Group commit for one process's claims (one per app; thread-safe).

    ``send`` runs each statement (unless given: the claiming INSERT on ``engine``'s claim
    connections, ``inbox.store.db.claim_connections``): the queueing and batching here are
    tested against an in-memory one. ``timeout_s`` bounds a claim made
    outside any ``deadline`` (the settings' database timeout).
    """

    def __init__(
        self,
        engine: Engine | None,
        max_rows: int = MAX_ROWS,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_statements: int = STATEMENTS,
        *,
        send: Send | None = None,
        counted: Counted | None = None,
    ) -> None:
        if send is None:
            if engine is None:
                raise ValueError("Claims needs an engine or a send function")
            send = for_engine(engine).insert
        self._send = send
        self._counted = counted
        self._max_rows = max_rows
        self._timeout_s = timeout_s
        self._mutex = threading.Lock()
        self._queue: deque[_Ticket] = deque()
        self._max_out = max(1, max_statements)
        self._out = 0  # statements out, or whose successor is being woken
        self.statements = 0  # statements sent, for tests and the benchmark

    def pending(self) -> int:
        with self._mutex:
            return len(self._queue)

    def claim(self, source: Source, ev: Prepared) -> Claimed | None:
        """The new event's row id once it is committed; the first delivery's answer when
        this is a copy of it (counted and committed); None when the key is taken otherwise
        (another body, a synchronous source)."""
        key = None if ev.key_digest is None else (source.tenant_id, source.id, ev.key_digest)
        label = (source.tenant, source.name)
        ticket = _Ticket(row(source, ev), key, current_deadline(self._timeout_s), label)
        with self._mutex:
            self._queue.append(ticket)
            lead = self._out < self._max_out
            if lead:
                self._out += 1
                ticket.lead = True  # no other leader takes it into a statement
        if not lead:
            if not ticket.wake.acquire(timeout=max(0.0, ticket.until - time.monotonic())):
                self._give_up(ticket)
                raise ClaimTimeout("no answer from the database within the deadline")
            lead = ticket.lead
        if lead:
            self._lead(ticket)
        if ticket.alone:
            with deadline_at(ticket.until):
                ticket.event_id = self._send([ticket.row]).get(ticket.public_id)
            self._count([ticket])
            return ticket.event_id
        if ticket.error is not None:
            own = ticket.error if lead else _own_copy(ticket.error)
            if own is ticket.error:
                raise own
            raise own from ticket.error
        return ticket.event_id

    def _give_up(self, ticket: _Ticket) -> None:
        """``ticket``'s deadline passed while it waited. Still queued: it leaves the queue.
        In a statement: it leaves that statement's outcome behind. Made the next leader
        meanwhile: it hands the lead on, so the queue does not stall."""
        with self._mutex:
            if ticket.lead:
                successor = self._pass_lead()
            else:
                successor = None
                try:
                    self._queue.remove(ticket)
                except ValueError:
                    pass  # taken into a statement already
        if successor is not None:
            successor.wake.release()

    def _pass_lead(self) -> _Ticket | None:
        """(Under the mutex.) The oldest waiting ticket becomes a leader, to be woken by the
        caller; with none waiting, the slot is given back."""
        for ticket in self._queue:
            if not ticket.lead:
                ticket.lead = True
                return ticket
        self._out -= 1
        return None

    def _take(self, own: _Ticket) -> list[_Ticket]:
        """The leader's own ticket, then the queue's head and every later ticket whose key
        is not in the batch yet (leaving other leaders' tickets to them)."""
        batch: list[_Ticket] = [own]
        keys: set[tuple[Any, ...]] = set() if own.key is None else {own.key}
        kept: deque[_Ticket] = deque()
        with self._mutex:
            self._queue.remove(own)
            while self._queue and len(batch) < self._max_rows:
                ticket = self._queue.popleft()
                if ticket.lead or (ticket.key is not None and ticket.key in keys):
                    kept.append(ticket)
                    continue
                if ticket.key is not None:
                    keys.add(ticket.key)
                batch.append(ticket)
            self._queue.extendleft(reversed(kept))
        return batch

    def _lead(self, own: _Ticket) -> None:
        batch = self._take(own)
        try:
            self._run(batch)
        finally:
            with self._mutex:
                successor = self._pass_lead()
            if successor is not None:
                successor.wake.release()
            for ticket in batch[1:]:  # batch[0] is the leader's own
                ticket.wake.release()

    def _run(self, batch: list[_Ticket]) -> None:
        # The leader's deadline (the batch's earliest): the leader runs the statement
        # itself, and every later ticket gives up on its own when its deadline passes.
        until = min(t.until for t in batch)
        self.statements += 1
        try:
            with deadline_at(until):
                inserted = self._send([t.row for t in batch])
        except (psycopg.DataError, psycopg.IntegrityError) as exc:
            if len(batch) == 1:
                batch[0].error = exc
            else:  # one row was refused: each retries alone, so it fails only itself
                for ticket in batch:
                    ticket.alone = True
            return
        except Exception as exc:  # down, too slow, or a deadlock victim: all of them hear so
            self._fail(batch, exc)
            return
        for ticket in batch:
            ticket.event_id = inserted.get(ticket.public_id)
        self._count(batch)

    def _count(self, tickets: list[_Ticket]) -> None:
        """The committed claims' outcomes, to ``counted``; a failure there is not theirs."""
        if self._counted is None:
            return
        counts: dict[tuple[IngestOutcome, str, str], int] = {}
        for t in tickets:
            if t.event_id is not None:
                copy = isinstance(t.event_id, Copy)
                outcome = IngestOutcome.DUPLICATE if copy else IngestOutcome.ACCEPTED
                key = (outcome, *t.label)
                counts[key] = counts.get(key, 0) + 1
        try:
            self._counted(counts)
        except Exception as exc:
            log.warning(
                "claim counts not recorded: %s",
                type(exc).__name__,
                extra={"error_class": type(exc).__name__},
            )

    @staticmethod
    def _fail(batch: list[_Ticket], exc: BaseException) -> None:
        for ticket in batch:
            ticket.error = exc
