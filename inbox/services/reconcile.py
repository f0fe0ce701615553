"""Reconciliation: compare a provider's list of event ids with what the inbox received.

- **missing**: the provider has the id, the inbox holds no event with that key. The
  provider's ids are reported as given (they are the provider's data).
- **extra**: the inbox holds a keyed event received inside the window whose key is
  not in the provider's list. Reported by the inbox's own ``public_id``.

The inbox stores keys only as digests over (tenant, source, key), so each provider id
is digested the same way and compared with ``events.key_digest``. Keys are removed
after the source's key window (see ``inbox.retention``): an id the provider sent
longer ago than that can no longer be matched and shows as missing. Reconcile lists
that cover the key window only. Events without a key (none was sent, or it was
pruned) cannot be compared at all and are only counted.

A provider-specific *fetcher* can supply the provider's list instead of a file:
``register_fetcher("stripe", fn)`` where ``fn(source, since)`` returns the ids of the
provider's events since the start of the window. None ships here.

``HOOKS``: callables run with every ``ReconcileResult`` (e.g. to feed a mismatch metric).
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from inbox.domain.errors import BadRequest
from inbox.domain.idempotency import key_digest
from inbox.domain.records import Source, SourceId, TenantId
from inbox.services.ports import ReconcileStore, WindowEvent
from inbox.services.runtime import Runtime
from inbox.services.wiring import reconcile_store
from inbox.store.db.errors import wrap_exceptions

log = logging.getLogger(__name__)
Tx = TypeVar("Tx")

Fetcher = Callable[[Source, datetime | None], Iterable[str]]
FETCHERS: dict[str, Fetcher] = {}


@dataclass(frozen=True)
class ReconcileResult:
    tenant: str
    source: str
    since: datetime
    key_window_hours: int
    provider_ids: int
    matched: int
    missing: tuple[str, ...]
    extra: tuple[str, ...]
    unkeyed: int

    @property
    def consistent(self) -> bool:
        return not self.missing and not self.extra

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": f"{self.tenant}/{self.source}",
            "since": self.since.isoformat(),
            "key_window_hours": self.key_window_hours,
            "provider_ids": self.provider_ids,
            "matched": self.matched,
            "missing_count": len(self.missing),
            "missing": list(self.missing),
            "extra_count": len(self.extra),
            "extra": list(self.extra),
            "unkeyed": self.unkeyed,
            "note": window_note(self.key_window_hours),
        }


HOOKS: list[Callable[[ReconcileResult], None]] = []


def window_note(hours: int) -> str:
    return (
        f"Keys are kept {hours} h after receipt, then pruned: a provider id older than "
        f"that cannot be matched and is reported missing. Compare lists covering the "
        f"last {hours} h."
    )


def register_fetcher(scheme_or_name: str, fn: Fetcher) -> Fetcher:
    """Make ``fn`` available as ``--fetcher scheme_or_name``."""
    FETCHERS[scheme_or_name] = fn
    return fn


def resolve_fetcher(name: str) -> Fetcher:
    """A registered fetcher, or ``package.module:function`` imported on demand."""
    if name in FETCHERS:
        return FETCHERS[name]
    module, sep, attr = name.partition(":")
    if sep and module and attr:
        try:
            fn = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise BadRequest(f"Cannot load fetcher {name!r}: {exc}.") from exc
        if not callable(fn):
            raise BadRequest(f"Fetcher {name!r} is not callable.")
        return fn  # type: ignore[no-any-return]
    known = ", ".join(sorted(FETCHERS)) or "none registered"
    raise BadRequest(f"No fetcher {name!r} ({known}); or give package.module:function.")


def _ids_from_json(data: Any) -> list[str]:
    if isinstance(data, dict):
        data = data.get("data")
    if not isinstance(data, list):
        raise BadRequest('Expected a JSON array, or an object with a "data" array.')
    out: list[str] = []
    for item in data:
        value = item.get("id") if isinstance(item, dict) else item
        if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
            raise BadRequest('Every entry needs an "id" (a string).')
        out.append(str(value))
    return out


def parse_ids(raw: str) -> list[str]:
    """Provider ids from one id per line, a JSON array (of ids or of objects with an
    ``id``), a ``{"data": [...]}`` export (Stripe's list format), or JSON Lines."""
    stripped = raw.strip()
    if stripped[:1] in ("[", "{"):
        try:
            ids = _ids_from_json(json.loads(stripped))
        except ValueError:
            lines = [ln for ln in stripped.splitlines() if ln.strip()]
            try:
                ids = _ids_from_json([json.loads(ln) for ln in lines])
            except ValueError as exc:
                raise BadRequest(f"Not valid JSON: {exc}.") from None
    else:
        ids = [ln.strip() for ln in raw.splitlines() if ln.strip()]
    return list(dict.fromkeys(ids))


def compare(
    tenant_id: TenantId,
    source_id: SourceId,
    provider_ids: Iterable[str],
    held: set[bytes],
    window: Sequence[WindowEvent],
) -> tuple[list[str], list[str], int, int, int]:
    """(missing, extra, matched, provider count, unkeyed) for one source.

    ``held``: the provider ids' digests the source holds; ``window``: its events
    received inside the window.
    """
    digests = {pid: key_digest(tenant_id, source_id, pid) for pid in dict.fromkeys(provider_ids)}
    wanted = set(digests.values())
    missing = [pid for pid, d in digests.items() if d not in held]
    extra = [e.public_id for e in window if e.key_digest is not None and e.key_digest not in wanted]
    unkeyed = sum(1 for e in window if e.key_digest is None)
    return missing, extra, len(digests) - len(missing), len(digests), unkeyed


def reconcile(
    store: ReconcileStore[Tx],
    tx: Tx,
    source: Source,
    provider_ids: Iterable[str],
    since: datetime,
    key_window_hours: int,
) -> ReconcileResult:
    """Compare ``provider_ids`` with the source's events; ``since`` starts the window."""
    ids = list(dict.fromkeys(provider_ids))
    held = store.known_digests(
        tx,
        source.tenant_id,
        source.id,
        [key_digest(source.tenant_id, source.id, pid) for pid in ids],
    )
    window = store.events_since(tx, source.tenant_id, source.id, since)
    missing, extra, matched, count, unkeyed = compare(
        source.tenant_id, source.id, ids, held, window
    )
    return ReconcileResult(
        tenant=source.tenant,
        source=source.name,
        since=since,
        key_window_hours=key_window_hours,
        provider_ids=count,
        matched=matched,
        missing=tuple(missing),
        extra=tuple(extra),
        unkeyed=unkeyed,
    )


def window_start(
    rt: Runtime, key_window_hours: int, store: ReconcileStore[Any] | None = None
) -> datetime:
    """Where a reconcile's window starts by default: ``key_window_hours`` before the
    database clock's now. ``store``: by default the one behind ``rt``'s engine."""
    reads = store if store is not None else reconcile_store(rt.engine)
    with wrap_exceptions(), reads.begin() as tx:
        return reads.window_start(tx, key_window_hours)


def check(
    rt: Runtime,
    source: Source,
    provider_ids: Iterable[str],
    since: datetime,
    key_window_hours: int,
    store: ReconcileStore[Any] | None = None,
) -> ReconcileResult:
    """``reconcile`` in a transaction of its own (the CLI's ``inbox reconcile``).
    ``store``: by default the one behind ``rt``'s engine."""
    reads = store if store is not None else reconcile_store(rt.engine)
    with wrap_exceptions(), reads.begin() as tx:
        return reconcile(reads, tx, source, provider_ids, since, key_window_hours)


def notify(result: ReconcileResult) -> None:
    """Run every hook; one that fails is logged and does not stop the others."""
    for hook in HOOKS:
        try:
            hook(result)
        except Exception as exc:
            log.warning(
                "reconcile hook %r failed: %s",
                hook,
                type(exc).__name__,
                extra={"error_class": type(exc).__name__},
            )
