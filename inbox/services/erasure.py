"""Erasure by key destruction, as operators run it: one implementation behind the admin API,
the console and the CLI (``inbox.store.write.erasure`` does the work in one transaction).

A subject's erasure runs at once; a tenant-wide one waits for a second operator, who
confirms or rejects it. Running one takes three steps, each resumable:

1. the inbox's database, one transaction: the holds checked, the keys' registry rows marked
   destroyed, the erasure ``destroying`` (from this commit on every reader, in every
   process, finds the payloads erased: readers check the registry in their own statement);
2. the key store: the keys' rows deleted (``inbox.store.db.keystore``; idempotent);
3. the inbox's database: the erasure ``done``, its audit row and its signed report
   (``inbox.services.reports``) in one transaction.

A crash (or a key store that does not answer) between them leaves the erasure
``destroying``: ``resume`` finishes it, and runs before every erasure and in the beat's
hourly upkeep. After step 2 this process forgets the keys; another process that had a
tenant's or subject's key cached may seal new payloads under it for at most
``INBOX_DATA_KEY_TTL_S`` (they read as erased), and opens nothing under it from step 1 on.
"""

from __future__ import annotations

from sqlalchemy import Connection

from inbox.domain.erasure import Erasure
from inbox.domain.records import TenantId
from inbox.infra.config import Settings
from inbox.services import reports
from inbox.services.operations import Actor
from inbox.services.runtime import Runtime
from inbox.store.db import keystore, sealing
from inbox.store.reads import erasures as reads
from inbox.store.write import erasure as store

__all__ = ["Erasure", "erase", "get", "listing", "resume", "review"]


def erase(
    rt: Runtime, actor: Actor, tenant: str, reason: str, *, subject: str | None = None
) -> Erasure:
    """Erase one subject's payloads of ``tenant`` now, or (``subject`` None) ask for the
    erasure of every payload of the tenant, which a second operator confirms."""
    resume(rt)
    with rt.engine.begin() as conn:
        asked, keys = store.request(
            conn, tenant, actor.name, reason, subject=subject, scope=actor.scope
        )
        _report(rt.settings, conn, asked, keys)
    return _destroy(rt, asked, keys)


def review(rt: Runtime, actor: Actor, public_id: str, *, approve: bool) -> Erasure:
    """A second operator confirms (the keys are destroyed) or rejects a tenant-wide erasure."""
    resume(rt)
    with rt.engine.begin() as conn:
        reviewed, keys = store.review(
            conn, public_id, actor.name, approve=approve, scope=actor.scope
        )
        _report(rt.settings, conn, reviewed, keys)
    return _destroy(rt, reviewed, keys)


def resume(rt: Runtime) -> int:
    """Finish every erasure a crash left ``destroying``; how many."""
    with rt.engine.connect() as conn:
        left = store.pending(conn)
    for erasure_id, keys in left:
        _finish(rt, erasure_id, keys)
    return len(left)


def _destroy(rt: Runtime, erasure: Erasure, keys: set[int]) -> Erasure:
    """Steps 2 and 3 for an erasure step 1 left ``destroying``; else it as it is."""
    if erasure.status != "destroying":
        return erasure
    return _finish(rt, erasure.id, keys) or erasure


def _finish(rt: Runtime, erasure_id: int, keys: set[int]) -> Erasure | None:
    engine, settings = rt.engine, rt.settings
    sealing.for_engine(engine).forget(keys)
    if keys:
        keystore.current().destroy(keys)
    with engine.begin() as conn:
        finished = store.finish(conn, erasure_id)
        if finished is None:  # another process finished it meanwhile
            return reads.by_id(conn, erasure_id)
        done, destroyed = finished
        _report(settings, conn, done, destroyed)
    sealing.for_engine(engine).forget(destroyed)
    return done


def _report(settings: Settings, conn: Connection, done: Erasure, keys: set[int]) -> None:
    """A done erasure's signed report, in the transaction that marks it done."""
    if done.status == "done":
        reports.record(conn, settings, "erasure", reports.erasure_report(done, keys))


def listing(rt: Runtime, scope: TenantId | None) -> list[Erasure]:
    with rt.engine.connect() as conn:
        return reads.listing(conn, scope)


def get(rt: Runtime, public_id: str, scope: TenantId | None) -> Erasure | None:
    with rt.engine.connect() as conn:
        return reads.get(conn, public_id, scope)
