"""The sealing job's statements: seal the payloads stored in clear, a batch at a time.

Each batch is one transaction: the job's progress row is locked (two jobs at once take
turns), the next rows in id order with ``key_id`` NULL are locked (a redaction or a
retention pass at the same moment waits, so a body removed meanwhile is never written
back), sealed under their tenant's key or their subject's (the source's ``subject_path``
read from the stored body), their step results, a synchronous event's stored answer and
their deliveries' bodies under the same key, and the progress row moves past them. A crash
loses at most the batch in flight, which rolled back: the next run starts where the last
commit left it.
Readers never wait on the job for long and read either form: ``key_id`` says which.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, text

from inbox.domain import ledger
from inbox.domain.erasure import subject_of
from inbox.domain.records import EventId
from inbox.infra.envelope import DataKey, tagged_key
from inbox.store.db.sealing import (
    BODY,
    DECISION,
    DELIVERY,
    HEADERS,
    RESPONSE,
    STEP,
    PayloadKeys,
)

_START = text("INSERT INTO sealing_progress (singleton) VALUES (true) ON CONFLICT DO NOTHING")
_LOCK = text("SELECT next_id, sealed FROM sealing_progress FOR UPDATE")
_NEXT = text(
    """
    SELECT e.id, e.tenant_id, e.body, e.headers, e.decision, e.sync, e.response_body,
           s.options ->> 'subject_path' AS subject_path
      FROM events e JOIN sources s ON s.id = e.source_id
     WHERE e.id >= :next AND e.key_id IS NULL
     ORDER BY e.id LIMIT :n
       FOR UPDATE OF e
    """
)
_SEAL = text(
    "UPDATE events SET body = :b, headers = '{}'::jsonb, headers_sealed = :h, key_id = :k,"
    " decision = CAST(:d AS jsonb), response_body = :r WHERE id = :id AND key_id IS NULL"
)
# The batch's deliveries (from the first event's day on: a delivery is never older than its
# event), locked as the events are.
_DELIVERIES = text(
    "SELECT id, event_id, public_id, body FROM deliveries"
    " WHERE event_id = ANY(:ids) AND id >= :lo FOR UPDATE"
)
_SEAL_DELIVERY = text("UPDATE deliveries SET body = :b WHERE id = :id")
_STEPS = text(
    "SELECT event_id, name, result FROM steps"
    " WHERE event_id = ANY(:ids) AND key_id IS NULL AND result IS NOT NULL FOR UPDATE"
)
_SEAL_STEP = text(
    "UPDATE steps SET result = to_jsonb(CAST(:r AS text)), key_id = :k"
    " WHERE event_id = :e AND name = :n AND key_id IS NULL"
)
_MOVE = text(
    "UPDATE sealing_progress SET next_id = :next, sealed = sealed + :n, updated_at = now(),"
    " finished_at = CASE WHEN :done THEN now() END"
)
_REMAINING = text("SELECT count(*) FROM events WHERE id >= :next AND key_id IS NULL")
_SHOW = text("SELECT next_id, sealed, started_at, updated_at, finished_at FROM sealing_progress")


@dataclass(frozen=True, slots=True)
class Progress:
    next_id: int  # every row below it has been looked at
    sealed: int  # rows sealed by the job, over all its runs
    remaining: int  # rows still in clear at or past next_id
    started_at: datetime | None
    updated_at: datetime | None
    finished_at: datetime | None


def seal_batch(conn: Connection, keys: PayloadKeys, batch: int) -> int:
    """Seal the next ``batch`` rows stored in clear; how many (0: none left)."""
    conn.execute(_START)
    position = conn.execute(_LOCK).one()
    rows = conn.execute(_NEXT, {"next": position.next_id, "n": batch}).all()
    used: dict[int, DataKey] = {}
    for r in rows:
        body = None if r.body is None else bytes(r.body)
        key = keys.key_for(r.tenant_id, subject_of(r.tenant_id, r.subject_path, body))
        conn.execute(
            _SEAL,
            {
                "id": r.id,
                "k": key.id,
                "b": None if body is None else key.seal(body, BODY),
                "h": key.seal(json.dumps(r.headers or {}).encode(), HEADERS),
                "d": None if r.decision is None else json.dumps(_sealed(key, DECISION, r.decision)),
                "r": _answer(key, r.id, r.sync, bytes(r.response_body)),
            },
        )
        used[r.id] = key
    # Their step results, under the same keys.
    for st in conn.execute(_STEPS, {"ids": list(used)}).all():
        key = used[st.event_id]
        params = {"e": st.event_id, "n": st.name, "k": key.id}
        conn.execute(_SEAL_STEP, {**params, "r": _sealed(key, st.name, st.result)})
    # Their deliveries' bodies (callback envelopes), as ``deliveries.enqueue`` seals them.
    if used:
        lo = ledger.bounds(ledger.day_of(min(used)))[0]
        for d in conn.execute(_DELIVERIES, {"ids": list(used), "lo": lo}).all():
            raw = bytes(d.body)
            if tagged_key(raw) is None:
                sealed = used[d.event_id].seal_tagged(raw, DELIVERY, d.public_id)
                conn.execute(_SEAL_DELIVERY, {"id": d.id, "b": sealed})
    last = rows[-1].id + 1 if rows else position.next_id
    conn.execute(_MOVE, {"next": last, "n": len(rows), "done": len(rows) < batch})
    return len(rows)


def _answer(key: DataKey, event_id: EventId, sync: bool, answer: bytes) -> bytes:
    """A synchronous event's stored answer sealed as ``queue.complete`` seals it (another
    event's is the acknowledgement, which holds no payload)."""
    if not sync or tagged_key(answer) is not None:
        return answer
    return key.seal_tagged(answer, RESPONSE, str(event_id))


def _sealed(key: DataKey, name: str, value: object) -> str:
    """A step result (or the decision) as ``PayloadKeys.seal_steps`` stores it."""
    return base64.b64encode(key.seal(json.dumps(value).encode(), STEP + name)).decode()


def progress(conn: Connection) -> Progress:
    row = conn.execute(_SHOW).first()
    next_id = 0 if row is None else int(row.next_id)
    remaining = int(conn.execute(_REMAINING, {"next": next_id}).scalar_one())
    if row is None:
        return Progress(0, 0, remaining, None, None, None)
    return Progress(
        next_id, int(row.sealed), remaining, row.started_at, row.updated_at, row.finished_at
    )
