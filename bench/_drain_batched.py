"""A prototype of a batched drain, kept in the benchmark to measure what it would gain.

``drain_batched_once`` has the signature of ``inbox.drain.drain_once`` and differs in
three ways:

1. Claim: the claiming transaction runs with ``SET LOCAL jit = off``, and the UPDATE
   finds the picked rows by primary key (``WHERE ev.id = ANY(ARRAY(SELECT id FROM
   picked))``) instead of joining ``picked``, which the planner sizes at ~1,100 rows
   and answers with a hash join over a sequential scan of ``events``.
2. Load: the whole batch is loaded by one SELECT in the claiming transaction.
3. Complete: for a playbook made only of ``effect=False`` steps without
   ``once_per_business_key``, every step runs in memory and the step results and
   completions of the whole batch are written by one fenced statement (the same
   ``fence``/``state``/``lease_expires_at > now()`` condition as ``queue.complete``).
   A row that fails the fence is lost, as with ``LeaseLost`` today.

Everything else (other playbooks, a step that raises, a step that queued outbound
callbacks) takes the existing per-event path: ``run_claimed``, or the runner's failure
handling.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Engine, text

from inbox.domain.bodyschema import check_body
from inbox.domain.playbooks import EventView, Playbook, StepContext, registry
from inbox.domain.records import Claim, LoadedEvent
from inbox.infra.config import Settings
from inbox.services.drain import DrainResult, run_config, worker_id
from inbox.services.runner import RunConfig, _failed, is_pure, run_claimed
from inbox.store import queue

Notify = Callable[[set[int]], None]

_JOIN = """      FROM picked
     WHERE ev.id = picked.id"""
_BY_KEY = """     WHERE ev.id = ANY(ARRAY(SELECT id FROM picked))"""
# Derived from the shipped claim, so the prototype follows any other change to it; when
# the join is no longer written this way, the shipped statement is used unchanged.
CLAIM_REWRITTEN = _JOIN in queue._CLAIM.text
_CLAIM = text(queue._CLAIM.text.replace(_JOIN, _BY_KEY)) if CLAIM_REWRITTEN else queue._CLAIM

# The shipped load's columns (inbox.store.queue.LOAD_COLUMNS), plus the fence.
_LOAD_BATCH = text(
    queue.LOAD_COLUMNS
    + """
         , e.fence
      FROM unnest(CAST(:ids AS bigint[]), CAST(:fences AS bigint[])) AS c(id, fence)
      JOIN events e ON e.id = c.id AND e.fence = c.fence AND e.state = 'processing'
      JOIN tenants t ON t.id = e.tenant_id
      JOIN sources s ON s.id = e.source_id
    """
)

_COMPLETE_BATCH = text(
    """
    WITH input AS (
        SELECT * FROM jsonb_to_recordset(CAST(:rows AS jsonb))
            AS i(id bigint, fence bigint, steps jsonb, outcome text, decision jsonb,
                 dup bigint, resp text)
    ), done AS (
        UPDATE events e
           SET state = 'completed', outcome = i.outcome, decision = i.decision,
               duplicate_of = i.dup, finished_at = now(),
               lease_owner = NULL, lease_expires_at = NULL,
               last_error_class = NULL, last_error_message = NULL,
               response_status = CASE WHEN i.resp IS NULL THEN e.response_status ELSE 200 END,
               response_body = coalesce(convert_to(i.resp, 'UTF8'), e.response_body)
          FROM input i
         WHERE e.id = i.id AND e.fence = i.fence AND e.state = 'processing'
           AND e.lease_expires_at > now()
        RETURNING e.id, e.attempts
    ), recorded AS (
        INSERT INTO steps (event_id, name, result, attempt)
        SELECT done.id, s.name, s.result, done.attempts
          FROM done JOIN input i ON i.id = done.id,
               jsonb_each(i.steps) AS s(name, result)
        ON CONFLICT (event_id, name) DO NOTHING
    )
    SELECT id FROM done
    """
)


def claim(conn: Connection, owner: str, limit: int, lease_seconds: float) -> list[Claim]:
    conn.execute(text("SET LOCAL jit = off"))
    tenants = conn.execute(text("SELECT count(*) FROM tenants WHERE NOT disabled")).scalar_one()
    per_tenant = max(1, -(-limit // max(1, tenants)))
    rows = conn.execute(
        _CLAIM, {"owner": owner, "limit": limit, "per_tenant": per_tenant, "lease": lease_seconds}
    )
    return sorted((Claim(r.id, r.fence) for r in rows), key=lambda c: c.id)


class _Unbatchable(Exception):
    """The playbook queued outbound callbacks: the per-event path writes those."""


def _run_in_memory(ev: LoadedEvent, pb: Playbook) -> dict[str, Any]:
    """Every step of an all-``effect=False`` playbook; returns the completion row."""
    check_body(ev.source_options.get("body_schema") or {}, ev.body, ev.content_type)
    view = EventView(
        ev.id,
        ev.public_id,
        ev.tenant,
        ev.source,
        ev.event_type,
        ev.content_type,
        ev.body,
        ev.attempts,
    )
    results: dict[str, Any] = dict(ev.steps)
    pending: dict[str, Any] = {}
    for step in pb.steps:
        if step.name in results:
            continue
        ctx = StepContext(view, step.name, results)
        value = step.fn(ctx)
        if getattr(ctx, "outbox", None):
            raise _Unbatchable()
        results[step.name] = pending[step.name] = value
    last = results[pb.steps[-1].name] if pb.steps else None
    decision = last if isinstance(last, dict) else {"result": last}
    resp = None
    if ev.sync:
        answer = {"id": ev.public_id, "status": "completed", "decision": decision}
        resp = json.dumps(answer, separators=(",", ":"))
    return {
        "id": ev.id,
        "steps": pending,
        "outcome": "completed",
        "decision": decision,
        "dup": None,
        "resp": resp,
    }


def _run_one(engine: Engine, c: Claim, cfg: RunConfig, notify: Notify | None) -> str:
    if notify is None:
        return run_claimed(engine, c, cfg)
    return run_claimed(engine, c, cfg, notify=notify)  # type: ignore[call-arg, unused-ignore]


def drain_batched_once(
    engine: Engine, settings: Settings, owner: str | None = None, notify: Notify | None = None
) -> DrainResult:
    with engine.begin() as conn:
        claims = claim(conn, owner or worker_id(), settings.batch_size, settings.lease_seconds)
        ids, fences = [c.id for c in claims], [c.fence for c in claims]
        rows = conn.execute(_LOAD_BATCH, {"ids": ids, "fences": fences}).all() if claims else []
    result = DrainResult(claimed=len(claims))
    cfg = run_config(settings)
    finished: list[dict[str, Any]] = []
    for row in rows:
        ev, c = queue.to_loaded(row), Claim(row.id, row.fence)
        pb = registry.resolve(
            ev.tenant, ev.source, ev.event_type, ev.source_options.get("playbook")
        )
        if not is_pure(pb):
            result.states[_run_one(engine, c, cfg, notify)] += 1
            continue
        try:
            finished.append({**_run_in_memory(ev, pb), "fence": c.fence})
        except _Unbatchable:
            result.states[_run_one(engine, c, cfg, notify)] += 1
        except Exception as exc:
            result.states[_failed(engine, c, ev, exc, pb.is_permanent(exc), cfg)] += 1
    result.states["lost"] += len(claims) - len(rows)
    if finished:
        with engine.begin() as conn:
            done = conn.execute(_COMPLETE_BATCH, {"rows": json.dumps(finished)}).all()
        result.states["completed"] += len(done)
        result.states["lost"] += len(finished) - len(done)
    return result
