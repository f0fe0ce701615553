"""Gaps found at the provider: ask its API what it sent, and fill what the inbox lacks.

- **stripe**: Stripe's events list is the record of what was sent. An event the inbox
  holds no key for is imported as it stands (``inbox.domain.intake.imported``): keyed by
  its Stripe id, so a late original delivery is then a copy, answered as one; marked
  ``reconciled`` (its stored verification, and an audit row). Workers take it up as any
  accepted event.
- **github**: GitHub does not redeliver a failed delivery by itself. A delivery whose
  ``X-GitHub-Delivery`` the inbox does not hold, and whose latest attempt failed, is
  redelivered (``POST …/attempts``): GitHub sends it again, signed, over the usual path.
  A delivery GitHub counts as answered (2xx) is not asked for again.

The source's ``reconcile`` option names the fetcher, a file holding the credential,
and, for GitHub, the hook. ``run_due`` runs every source whose ``every_minutes`` have
passed since its last run (beat calls it).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from inbox.domain import intake
from inbox.domain.errors import BadRequest
from inbox.domain.idempotency import key_digest
from inbox.domain.records import Source
from inbox.domain.retention import key_window_hours
from inbox.infra import metrics
from inbox.outbound import providers
from inbox.services.ports import GapfillStore
from inbox.services.runtime import Runtime
from inbox.services.wiring import gapfill_store

log = logging.getLogger(__name__)

DEFAULT_EVERY_MINUTES = 60


@dataclass(frozen=True)
class FillResult:
    tenant: str
    source: str
    fetcher: str
    since: datetime
    provider_ids: int
    missing: tuple[str, ...]
    imported: int
    redelivered: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": f"{self.tenant}/{self.source}",
            "fetcher": self.fetcher,
            "since": self.since.isoformat(),
            "provider_ids": self.provider_ids,
            "missing_count": len(self.missing),
            "missing": list(self.missing),
            "imported": self.imported,
            "redelivered": self.redelivered,
        }


def config(source: Source) -> dict[str, Any]:
    cfg = source.options.reconcile
    if not cfg:
        raise BadRequest(
            f"Source {source.path} has no reconcile option: set one (fetcher, credentials) "
            "or give --ids FILE / --fetcher NAME."
        )
    return cfg


def read_credentials(path: str) -> str:
    """The API key or token in the file the option names (its first line)."""
    try:
        value = Path(path).read_text(encoding="utf-8").strip().splitlines()
    except OSError as exc:
        raise BadRequest(
            f"Cannot read the reconcile credentials file {path}: {exc.strerror}."
        ) from None
    if not value or not value[0].strip():
        raise BadRequest(f"The reconcile credentials file {path} is empty.")
    return value[0].strip()


def _missing(store: GapfillStore[Any], source: Source, ids: list[str]) -> list[str]:
    digests = {pid: key_digest(source.tenant_id, source.id, pid) for pid in dict.fromkeys(ids)}
    with store.begin() as tx:
        held = store.known_digests(tx, source.tenant_id, source.id, list(digests.values()))
    return [pid for pid, d in digests.items() if d not in held]


def _stripe(
    store: GapfillStore[Any],
    source: Source,
    cfg: dict[str, Any],
    since: datetime,
    ttl_hours: int,
) -> FillResult:
    key = read_credentials(cfg["credentials"])
    events = {str(e["id"]): e for e in providers.stripe_events(cfg.get("api_base"), key, since)}
    missing = _missing(store, source, list(events))
    imported = 0
    for pid in reversed(missing):  # oldest first: Stripe lists newest first
        event = events[pid]
        body = json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode()
        kind = event.get("type") if isinstance(event.get("type"), str) else None
        ev = intake.imported(source, pid, body, kind, time.time(), ttl_hours, "stripe")
        ev = store.seal(source.tenant_id, ev)
        with store.begin() as tx:
            imported += store.import_event(tx, source, ev, "stripe")
    return _result(source, "stripe", since, len(events), missing, imported, 0)


def _failed(attempts: list[dict[str, Any]]) -> bool:
    """The latest attempt of one delivery (GitHub lists newest first) was not answered 2xx."""
    code = attempts[0].get("status_code")
    return not (isinstance(code, int) and 200 <= code < 300)


def _github(
    store: GapfillStore[Any], source: Source, cfg: dict[str, Any], since: datetime
) -> FillResult:
    token = read_credentials(cfg["credentials"])
    by_guid: dict[str, list[dict[str, Any]]] = {}
    for d in providers.github_deliveries(cfg.get("api_base"), token, cfg["hook"], since):
        by_guid.setdefault(str(d["guid"]), []).append(d)
    missing = _missing(store, source, list(by_guid))
    redelivered = 0
    for guid in missing:
        attempts = by_guid[guid]
        if _failed(attempts) and isinstance(attempts[0].get("id"), int):
            providers.github_redeliver(cfg.get("api_base"), token, cfg["hook"], attempts[0]["id"])
            redelivered += 1
    return _result(source, "github", since, len(by_guid), missing, 0, redelivered)


def _result(
    source: Source,
    fetcher: str,
    since: datetime,
    count: int,
    missing: list[str],
    imported: int,
    redelivered: int,
) -> FillResult:
    return FillResult(
        source.tenant, source.name, fetcher, since, count, tuple(missing), imported, redelivered
    )


def fill(
    rt: Runtime, source: Source, since: datetime, store: GapfillStore[Any] | None = None
) -> FillResult:
    """One run for ``source``: fetch the provider's list since ``since``, fill the gaps,
    record the run (audit) and its metrics. Raises ProviderError or BadRequest.
    ``store``: by default the one behind ``rt``'s engine."""
    store = store if store is not None else gapfill_store(rt.engine)
    cfg = config(source)
    default_ttl = rt.settings.key_ttl_hours
    ttl = key_window_hours(source.scheme, source.options.key_ttl_hours, default_ttl)
    if cfg["fetcher"] == "stripe":
        result = _stripe(store, source, cfg, since, ttl)
    else:
        result = _github(store, source, cfg, since)
    with store.begin() as tx:
        store.record_run(
            tx,
            source,
            {
                "provider_ids": result.provider_ids,
                "missing": len(result.missing),
                "imported": result.imported,
                "redelivered": result.redelivered,
            },
        )
    metrics.record_reconcile(source.tenant, source.name, len(result.missing), 0)
    metrics.record_gaps_filled(source.tenant, source.name, result.imported, result.redelivered)
    if result.missing:
        log.warning(
            "reconcile %s: %d event(s) the provider sent were missing: %d imported, %d redelivered",
            f"{source.tenant}/{source.name}",
            len(result.missing),
            result.imported,
            result.redelivered,
            extra={"tenant": source.tenant, "source": source.name},
        )
    return result


def run_due(rt: Runtime, store: GapfillStore[Any] | None = None) -> list[FillResult]:
    """Every enabled source with a ``reconcile`` option whose interval has passed; each
    looks back over its key window (what the inbox can still match). A source that fails
    is logged with the reason and does not stop the others. ``store``: by default the one
    behind ``rt``'s engine."""
    store = store if store is not None else gapfill_store(rt.engine)
    with store.begin() as tx:
        sources = [s for s in store.sources(tx) if s.enabled and s.options.reconcile]
        now = store.window_start(tx, 0)
        due = []
        for s in sources:
            every = timedelta(minutes=(s.options.reconcile or {}).get("every_minutes", 60))
            last = store.last_run(tx, s.id)
            if last is None or now - last >= every:
                due.append(s)
    results = []
    for s in due:
        hours = key_window_hours(s.scheme, s.options.key_ttl_hours, rt.settings.key_ttl_hours)
        try:
            results.append(fill(rt, s, now - timedelta(hours=hours), store))
        except (providers.ProviderError, BadRequest) as exc:
            log.warning(
                "reconcile %s failed: %s",
                f"{s.tenant}/{s.name}",
                exc,
                extra={"tenant": s.tenant, "source": s.name, "error_class": type(exc).__name__},
            )
    return results
