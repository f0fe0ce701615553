"""Retention and the ledger's days, for the beat's tasks and the CLI alike."""

from __future__ import annotations

from dataclasses import dataclass

from inbox.domain.retention import PruneResult, key_window_hours
from inbox.services import reports
from inbox.services.runtime import Runtime
from inbox.store.reads import sources as sources_reads
from inbox.store.schema import partitions
from inbox.store.schema.partitions import Day, Made, Retired
from inbox.store.write import retention

__all__ = ["Day", "Made", "PruneResult", "Retired", "ensure_partitions", "ledger_days", "prune"]


def prune(rt: Runtime, dry_run: bool = False) -> PruneResult:
    """One retention round: expired keys, old bodies and attempts, old ledger days; a
    round that ran (not a dry run) writes its signed report (``inbox.services.reports``)."""
    settings = rt.settings
    result = retention.prune_once(rt.engine, settings, dry_run=dry_run)
    if not dry_run:
        with rt.engine.begin() as conn:
            rules = {
                f"{s.tenant}/{s.name}": {
                    "retention_days": s.options.retention_days,
                    "key_window_hours": key_window_hours(
                        s.scheme, s.options.key_ttl_hours, settings.key_ttl_hours
                    ),
                }
                for s in sources_reads.list_sources(conn)
            }
            reports.record(conn, settings, "prune", reports.prune_report(result, settings, rules))
    return result


def ensure_partitions(rt: Runtime) -> Made:
    """Today's and the week ahead's partitions (rows in DEFAULT moved out)."""
    return partitions.ensure_ahead(rt.engine)


@dataclass(frozen=True)
class LedgerDays:
    """Every day's estimated rows, the ledger window (and why it is that long), and what
    the next prune would drop or keep."""

    days: list[Day]
    window: int
    note: str | None
    verdicts: Retired


def ledger_days(rt: Runtime) -> LedgerDays:
    with rt.engine.connect() as conn:
        days = partitions.overview(conn)
        window, note = retention.ledger_window(rt.settings, sources_reads.list_sources(conn))
    return LedgerDays(days, window, note, partitions.retire(rt.engine, window, dry_run=True))
