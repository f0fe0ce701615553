"""What ``/readyz`` checks, each as one line: the database takes writes, its schema is the
code's, and every source's playbook is registered in this process."""

from __future__ import annotations

from sqlalchemy import Connection, Engine, text

from inbox.domain.playbooks import Registry, registry
from inbox.services import startup
from inbox.store.db.availability import unreachable, writable
from inbox.store.reads import sources as source_reads
from inbox.store.schema.migrate import head_revision

__all__ = ["NOT_CHECKED", "playbooks", "schema", "store_checks", "unreachable", "writable"]

NOT_CHECKED = "not checked"

_HEAD: list[str | None] = []


def _head() -> str | None:
    if not _HEAD:  # read once: the migrations do not change under a running process
        _HEAD.append(head_revision())
    return _HEAD[0]


def schema(conn: Connection) -> str:
    """ "ok" when the database is at the code's newest migration; otherwise what it is at."""
    head = _head()
    exists = conn.execute(text("SELECT to_regclass('alembic_version') IS NOT NULL")).scalar()
    if not exists:
        return "not migrated (run inbox migrate)"
    current = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    if current == [head]:
        return "ok"
    return f"at {', '.join(current) or 'nothing'}, the code needs {head} (run inbox migrate)"


def playbooks(conn: Connection, reg: Registry = registry) -> str:
    """ "ok", or the sources whose playbook no module of INBOX_PLAYBOOKS registers here."""
    missing = [
        f"{t}/{s} names {pb!r}"
        for t, s, pb in source_reads.named_playbooks(conn)
        if pb not in reg.by_name
    ]
    if not missing:
        return "ok"
    more = f" (+{len(missing) - 3} more)" if len(missing) > 3 else ""
    return (
        f"not registered: {'; '.join(missing[:3])}{more}; their events are held until"
        " INBOX_PLAYBOOKS loads it"
    )


def store_checks(engine: Engine) -> dict[str, str]:
    """``database``, ``schema``, ``secrets`` and ``playbooks``, each "ok" or what is wrong,
    on one connection; a database that does not answer leaves the others not checked."""
    checks: dict[str, str] = {}
    try:
        with engine.connect() as conn:
            checks["database"] = writable(conn)
            checks["schema"] = schema(conn)
            if checks["schema"] == "ok":
                checks["secrets"] = startup.secrets_problem(conn) or "ok"
                checks["playbooks"] = playbooks(conn)
    except Exception as exc:
        checks.setdefault("database", unreachable(exc))
    for name in ("schema", "secrets", "playbooks"):
        checks.setdefault(name, NOT_CHECKED)
    return checks
