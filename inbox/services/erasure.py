"""Erasure by key destruction, as operators run it: one implementation behind the admin API,
the console and the CLI (``inbox.store.write.erasure`` does the work in one transaction).

A subject's erasure runs at once; a tenant-wide one waits for a second operator, who
confirms or rejects it. After COMMIT this process forgets the destroyed keys; other
processes drop theirs within ``INBOX_DATA_KEY_TTL_S``. A done erasure writes its signed
report in the same transaction (``inbox.services.reports``).
"""

from __future__ import annotations

from sqlalchemy import Connection

from inbox.domain.erasure import Erasure
from inbox.domain.records import TenantId
from inbox.services import reports
from inbox.services.operations import Actor
from inbox.services.runtime import Runtime
from inbox.store.db import sealing
from inbox.store.reads import erasures as reads
from inbox.store.write import erasure as store

__all__ = ["Erasure", "erase", "get", "listing", "review"]


def erase(
    rt: Runtime, actor: Actor, tenant: str, reason: str, *, subject: str | None = None
) -> Erasure:
    """Erase one subject's payloads of ``tenant`` now, or (``subject`` None) ask for the
    erasure of every payload of the tenant, which a second operator confirms."""
    with rt.engine.begin() as conn:
        done, keys = store.request(
            conn, tenant, actor.name, reason, subject=subject, scope=actor.scope
        )
        _report(rt, conn, done, keys)
    sealing.for_engine(rt.engine).forget(keys)
    return done


def review(rt: Runtime, actor: Actor, public_id: str, *, approve: bool) -> Erasure:
    """A second operator confirms (the keys are destroyed) or rejects a tenant-wide erasure."""
    with rt.engine.begin() as conn:
        done, keys = store.review(conn, public_id, actor.name, approve=approve, scope=actor.scope)
        _report(rt, conn, done, keys)
    sealing.for_engine(rt.engine).forget(keys)
    return done


def _report(rt: Runtime, conn: Connection, done: Erasure, keys: set[int]) -> None:
    """A done erasure's signed report, in its own transaction (``inbox.services.reports``)."""
    if done.status == "done":
        reports.record(conn, rt.settings, "erasure", reports.erasure_report(done, keys))


def listing(rt: Runtime, scope: TenantId | None) -> list[Erasure]:
    with rt.engine.connect() as conn:
        return reads.listing(conn, scope)


def get(rt: Runtime, public_id: str, scope: TenantId | None) -> Erasure | None:
    with rt.engine.connect() as conn:
        return reads.get(conn, public_id, scope)
