"""Whole-batch statements for the drain: load a claimed batch, record the recovery points
of many events at once, complete many events at once.

Playbooks whose steps have no outside effect need no recovery point between steps:
their results and completions for a whole batch go in one fenced statement. Playbooks with
effects run in lockstep across the batch (``inbox.services.lockstep``): the recovery points
of one step of every event go in one fenced statement, so one commit serves the batch.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from sqlalchemy import Connection

from inbox.domain.records import Claim, Completion, EventId, LoadedEvent
from inbox.store.db import sealing
from inbox.store.db.days import DayBounded
from inbox.store.write import queue
from inbox.store.write.queue import LOAD_COLUMNS, to_loaded

_LOAD_MANY = DayBounded(
    LOAD_COLUMNS
    + """
      FROM unnest(CAST(:ids AS bigint[]), CAST(:fences AS bigint[])) AS c(id, fence)
      JOIN events e ON e.id = c.id AND e.fence = c.fence AND e.state = 'processing'
           AND e.id >= {lo} AND e.id < {hi}
      JOIN tenants t ON t.id = e.tenant_id
      JOIN sources s ON s.id = e.source_id
    """
)


def load_many(conn: Connection, claims: list[Claim]) -> dict[EventId, LoadedEvent]:
    """The claimed events (those whose lease is still ours), by id."""
    if not claims:
        return {}
    ids = [c.id for c in claims]
    rows = conn.execute(_LOAD_MANY.spanning(ids), {"ids": ids, "fences": [c.fence for c in claims]})
    return {EventId(row.id): to_loaded(conn, row) for row in rows}


# Step results arrive as one JSON object per event, its keys in the order the steps ran:
# read as json (jsonb would sort the keys), the steps of one statement get completed_at a
# microsecond apart in that order, the last at now() (the event's finished_at), so they
# list in run order, and before the completion, wherever they are sorted by time.
# Every row is fenced like queue.complete: an event whose lease was lost or taken
# over is not in `done`, gets no step rows, and is reported back as lost.
_COMPLETE_MANY = DayBounded(
    """
    WITH input AS (
        SELECT * FROM json_to_recordset(CAST(:rows AS json))
            AS i(id bigint, fence bigint, steps json, key_id bigint, outcome text, decision jsonb,
                 resp text)
    ), done AS (
        UPDATE events e
           SET state = 'completed', outcome = i.outcome, decision = i.decision,
               finished_at = now(), lease_owner = NULL, lease_expires_at = NULL,
               last_error_class = NULL, last_error_message = NULL,
               response_status = CASE WHEN i.resp IS NULL THEN e.response_status ELSE 200 END,
               response_body = coalesce(decode(i.resp, 'base64'), e.response_body)
          FROM input i
         WHERE e.id = i.id AND e.fence = i.fence AND e.state = 'processing'
           AND e.id >= {lo} AND e.id < {hi} AND e.lease_expires_at > now()
        RETURNING e.id, e.attempts, e.replay, e.ordering_key IS NOT NULL AS laned
    ), recorded AS (
        INSERT INTO steps (event_id, name, result, key_id, attempt, replay, completed_at)
        SELECT done.id, s.name, CAST(s.result AS jsonb), i.key_id, done.attempts, done.replay,
               now() - (count(*) OVER (PARTITION BY done.id) - s.n) * interval '1 us'
          FROM done JOIN input i ON i.id = done.id,
               json_each(i.steps) WITH ORDINALITY AS s(name, result, n)
        ON CONFLICT (event_id, name) DO NOTHING
    )
    SELECT id, laned FROM done
    """
)


def _steps(
    keys: sealing.PayloadKeys, conn: Connection, event_id: EventId, steps: dict[str, Any]
) -> dict[str, Any]:
    """A row's ``steps`` and ``key_id``: its results sealed under its event's key."""
    sealed, key = keys.seal_steps(conn, event_id, steps)
    return {"steps": sealed, "key_id": key}


def _response(
    keys: sealing.PayloadKeys, conn: Connection, event_id: EventId, text_response: str | None
) -> str | None:
    """A synchronous answer as the statement takes it: base64 of its bytes, sealed under the
    event's key where its payload is."""
    if text_response is None:
        return None
    raw = keys.seal_tagged(conn, event_id, str(event_id), text_response.encode(), sealing.RESPONSE)
    return base64.b64encode(raw).decode()


def complete_many(conn: Connection, completions: list[Completion]) -> set[EventId]:
    """Record the steps and complete every event still leased to us; returns their ids."""
    if not completions:
        return set()
    keys = sealing.for_engine(conn.engine)
    rows = [
        {
            "id": x.claim.id,
            "fence": x.claim.fence,
            **_steps(keys, conn, x.claim.id, x.steps),
            "outcome": x.outcome,
            "decision": keys.seal_decision(conn, x.claim.id, x.decision),
            "resp": _response(keys, conn, x.claim.id, x.sync_response),
        }
        for x in completions
    ]
    stmt = _COMPLETE_MANY.spanning([x.claim.id for x in completions])
    done = conn.execute(stmt, {"rows": json.dumps(rows)}).all()
    queue.advance(conn, [r.id for r in done if r.laned])  # their lanes' next events
    return {EventId(r.id) for r in done}


# The recovery points of many events in one statement, fenced like queue.record_steps: an
# event whose lease was lost or taken over gets no rows and keeps its lease as it was; the
# live ones have their leases extended. Returns the live ids (the caller stops the rest).
_RECORD_MANY = DayBounded(
    """
    WITH input AS (
        SELECT * FROM json_to_recordset(CAST(:rows AS json))
            AS i(id bigint, fence bigint, steps json, key_id bigint)
    ), live AS (
        UPDATE events e SET lease_expires_at = now() + make_interval(secs => :lease)
          FROM input i
         WHERE e.id = i.id AND e.fence = i.fence AND e.state = 'processing'
           AND e.id >= {lo} AND e.id < {hi} AND e.lease_expires_at > now()
        RETURNING e.id, e.attempts, e.replay, e.ordering_key IS NOT NULL AS laned
    ), recorded AS (
        INSERT INTO steps (event_id, name, result, key_id, attempt, replay, completed_at)
        SELECT live.id, s.name, CAST(s.result AS jsonb), i.key_id, live.attempts, live.replay,
               now() - (count(*) OVER (PARTITION BY live.id) - s.n) * interval '1 us'
          FROM live JOIN input i ON i.id = live.id,
               json_each(i.steps) WITH ORDINALITY AS s(name, result, n)
        ON CONFLICT (event_id, name) DO NOTHING
    )
    SELECT id FROM live
    """
)


def record_many(
    conn: Connection, points: list[tuple[Claim, dict[str, Any]]], lease: float
) -> set[EventId]:
    """Record each claim's step results (its recovery points) while its lease is live, and
    extend those leases; returns the ids still leased to us."""
    if not points:
        return set()
    keys = sealing.for_engine(conn.engine)
    rows = [
        {"id": c.id, "fence": c.fence, **_steps(keys, conn, c.id, steps)} for c, steps in points
    ]
    stmt = _RECORD_MANY.spanning([c.id for c, _ in points])
    live = conn.execute(stmt, {"rows": json.dumps(rows), "lease": lease})
    return {EventId(r.id) for r in live}
