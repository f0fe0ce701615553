"""Events imported from the provider's own API, and when a source was last reconciled.

An import is the claiming INSERT of a delivery (``claims.execute``) plus an audit row
(``action = 'reconciled'``, subject the event) in one transaction: the key is taken and
the mark is written together, or neither.
"""

from __future__ import annotations

import json

from sqlalchemy import Connection, insert

from inbox.domain.intake import Prepared
from inbox.domain.records import Source
from inbox.store.db.claims import execute, row
from inbox.store.schema.config_tables import audit_log

ACTOR = "reconcile"


def import_event(conn: Connection, source: Source, ev: Prepared, fetcher: str) -> bool:
    """Claim ``ev``'s key as a new event; False when the inbox holds it already."""
    got = execute(conn.connection, [row(source, ev)]).get(ev.public_id)
    if not isinstance(got, int):
        return False  # a copy, or the key taken by another body: nothing new
    conn.execute(
        insert(audit_log).values(
            actor=ACTOR,
            action="reconciled",
            subject_kind="event",
            subject_id=got,
            detail={
                "public_id": ev.public_id,
                "fetcher": fetcher,
                "source": f"{source.tenant}/{source.name}",
            },
        )
    )
    return True


def record_run(conn: Connection, source: Source, counts: dict[str, int]) -> None:
    """One reconcile run of ``source`` (the schedule reads the latest)."""
    conn.execute(
        insert(audit_log).values(
            actor=ACTOR,
            action="reconcile_run",
            subject_kind="source",
            subject_id=source.id,
            detail=json.loads(json.dumps(counts)),
        )
    )
