"""What ``/readyz`` checks, each as one line: the database takes writes, its schema is the
code's, every source's playbook is registered in this process, and the key store answers
where payload keys exist."""

from __future__ import annotations

from sqlalchemy import Connection, Engine, text

from inbox.domain.playbooks import Registry, registry
from inbox.services import startup
from inbox.store.db import keystore as keys
from inbox.store.db.availability import unreachable, writable
from inbox.store.reads import sources as source_reads
from inbox.store.schema.migrate import head_revision, known_revisions

__all__ = [
    "AHEAD",
    "NOT_CHECKED",
    "keystore",
    "playbooks",
    "schema",
    "store_checks",
    "unreachable",
    "writable",
]

NOT_CHECKED = "not checked"
NOT_CONFIGURED = "not configured"

# What ``schema`` says of a database migrated by a newer release than this process's: it
# still serves (a rolling upgrade migrates first, then replaces processes one by one; a
# load balancer that dropped every old process at once would be the outage the rollout
# avoids), and says what to do.
AHEAD = "ahead"

_KNOWN: list[tuple[str | None, frozenset[str]]] = []


def _known() -> tuple[str | None, frozenset[str]]:
    if not _KNOWN:  # read once: the migrations do not change under a running process
        _KNOWN.append((head_revision(), known_revisions()))
    return _KNOWN[0]


def schema(conn: Connection) -> str:
    """ "ok" when the database is at the code's newest migration; "ahead ..." when a newer
    release migrated it; otherwise what it is at and what to run."""
    head, known = _known()
    exists = conn.execute(text("SELECT to_regclass('alembic_version') IS NOT NULL")).scalar()
    if not exists:
        return "not migrated (run inbox migrate)"
    current = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    if current == [head]:
        return "ok"
    if current and not set(current) <= known:
        return (
            f"{AHEAD}: at {', '.join(current)}, newer than this release's {head}; serving"
            " until this process is replaced by the release that migrated it"
        )
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


def keystore(conn: Connection) -> str:
    """ "ok" when the key store answers; "not configured" where it is unset and no payload
    key exists; else why sealed payloads cannot be opened (unset while keys are registered,
    or not answering)."""
    registered = int(conn.execute(text("SELECT count(*) FROM data_keys")).scalar_one())
    if not keys.configured():
        if not registered:
            return NOT_CONFIGURED
        return (
            f"INBOX_KEYSTORE_URL is not set, yet {registered} payload key(s) are registered:"
            " sealed payloads cannot be opened, nor new ones sealed (set it to the key store)"
        )
    try:
        with keys.current().engine.connect() as ks:
            ks.execute(text("SELECT 1"))
    except Exception as exc:
        return unreachable(exc)
    return "ok"


def store_checks(engine: Engine) -> dict[str, str]:
    """``database``, ``schema``, ``secrets``, ``playbooks`` and ``keystore``, each "ok" or
    what is wrong, on one connection; a database that does not answer leaves the others not
    checked. A schema ``AHEAD`` of the code (a newer release migrated it) is checked on,
    and is not a reason to be unready (``web.health``)."""
    checks: dict[str, str] = {}
    try:
        with engine.connect() as conn:
            checks["database"] = writable(conn)
            checks["schema"] = schema(conn)
            if checks["schema"] == "ok" or checks["schema"].startswith(AHEAD):
                checks["secrets"] = startup.secrets_problem(conn) or "ok"
                checks["playbooks"] = playbooks(conn)
                checks["keystore"] = keystore(conn)
    except Exception as exc:
        checks.setdefault("database", unreachable(exc))
    for name in ("schema", "secrets", "playbooks", "keystore"):
        checks.setdefault(name, NOT_CHECKED)
    return checks
