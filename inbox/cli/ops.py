"""``inbox prune`` and ``inbox reconcile``: retention and reconciliation from a shell."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import IO

import click

from inbox.cli.base import current, main, settings, split_ref
from inbox.cli.output import json_option
from inbox.domain.retention import key_window_hours
from inbox.infra import metrics
from inbox.outbound import providers
from inbox.services import admin, gapfill, upkeep
from inbox.services import reconcile as rec


@main.command()
@click.option("--dry-run", is_flag=True, help="Count what would be removed; change nothing.")
def prune(dry_run: bool) -> None:
    """Remove expired dedup keys, old raw bodies and old delivery attempts, and drop the
    ledger's days past INBOX_LEDGER_RETENTION_DAYS (each day kept is listed with why).

    Only finished events (completed or quarantined) are touched. A source whose key
    window is shorter than its provider's retry horizon keeps its keys; it is listed
    as refused and the exit status is 1.
    """
    result = upkeep.prune(current(), dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    click.echo(f"keys              {verb} {result.keys_removed}")
    click.echo(f"bodies            {verb} {result.bodies_removed}")
    if result.bodies_held:
        click.echo(f"bodies            kept {result.bodies_held} under legal hold")
    click.echo(f"delivery attempts {verb} {result.attempts_folded} (counts kept on deliveries)")
    days = ", ".join(result.days_dropped) or "none"
    click.echo(f"ledger days       {'would drop' if dry_run else 'dropped'} {days}")
    for kept in result.days_kept:  # past the window, and why each stays
        click.echo(f"day kept          {kept}")
    if result.ledger_window_note:
        click.echo(f"note              {result.ledger_window_note}", err=True)
    for refusal in result.refused_sources:
        click.echo(f"refused           {refusal}", err=True)
    if result.refused_sources:
        raise click.exceptions.Exit(1)


@main.command("partitions")
@click.option("--ensure", is_flag=True, help="First make today's and the week's partitions.")
def partitions_cmd(ensure: bool) -> None:
    """The ledger's days: estimated rows, and for each day past the ledger window
    whether the next prune drops it or why it stays."""
    if ensure:
        made = upkeep.ensure_partitions(current())
        click.echo(f"created {len(made.created)} partitions, moved {made.moved} rows")
    ledger = upkeep.ledger_days(current())
    days, window, note, verdicts = ledger.days, ledger.window, ledger.note, ledger.verdicts
    kept = dict(verdicts.kept)
    click.echo(f"ledger window {window} d" + (f" ({note})" if note else ""))
    for d in days:
        if d.day in verdicts.dropped:
            status = "dropped by the next prune"
        else:
            status = f"kept: {kept[d.day]}" if d.day in kept else "inside the window"
        click.echo(f"{d.day}  events ~{d.events:<10} deliveries ~{d.deliveries:<10} {status}")


def _parse_since(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 time") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@main.command("reconcile")
@click.option(
    "--source", "ref", required=True, metavar="TENANT/SOURCE", help="The source to check."
)
@click.option(
    "--ids",
    "ids_file",
    type=click.File("r", encoding="utf-8"),
    help="The provider's event ids: one per line, a JSON array (of ids, or of objects "
    'with an "id"), or a {"data": [...]} export. "-" reads stdin.',
)
@click.option("--fetcher", help="A registered fetcher's name, or package.module:function.")
@click.option(
    "--since",
    callback=_parse_since,
    metavar="ISO",
    help="Start of the window (default: now less the source's key window).",
)
@json_option
@click.option(  # the name before --json; kept for scripts
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", hidden=True
)
def reconcile_cmd(
    ref: str,
    ids_file: IO[str] | None,
    fetcher: str | None,
    since: datetime | None,
    as_json: bool,
    fmt: str,
) -> None:
    """Compare a provider's event ids with the inbox: missing and extra events.

    Keys are kept only for the source's key window, so compare lists that cover at
    most that window. The exit status is 1 when anything is missing or extra.

    With neither --ids nor --fetcher, the source's reconcile option is used: the
    provider's API is asked what it sent, and what the inbox lacks is imported
    (Stripe) or redelivered (GitHub); the exit status is then 0.
    """
    fmt = "json" if as_json else fmt
    if ids_file is not None and fetcher is not None:
        raise click.UsageError("give at most one of --ids FILE and --fetcher NAME")
    tenant, name = split_ref(ref)
    if ids_file is None and fetcher is None:
        _fill(tenant, name, since, fmt)
        return
    src = admin.get_source(current(), tenant, name)
    hours = key_window_hours(src.scheme, src.options.key_ttl_hours, settings().key_ttl_hours)
    start = since or rec.window_start(current(), hours)
    if ids_file is not None:
        provider_ids = rec.parse_ids(ids_file.read())
    else:
        provider_ids = list(rec.resolve_fetcher(fetcher or "")(src, start))
    result = rec.check(current(), src, provider_ids, start, hours)
    rec.notify(result)
    metrics.record_reconcile(result.tenant, result.source, len(result.missing), len(result.extra))
    if fmt == "json":
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        _print_text(result)
    if not result.consistent:
        raise click.exceptions.Exit(1)


def _fill(tenant: str, name: str, since: datetime | None, fmt: str) -> None:
    cfg = settings()
    src = admin.get_source(current(), tenant, name)
    if not src.options.reconcile:
        raise click.UsageError(
            f"give --ids FILE or --fetcher NAME: {tenant}/{name} has no reconcile option"
            " (fetcher, credentials) to ask the provider with"
        )
    hours = key_window_hours(src.scheme, src.options.key_ttl_hours, cfg.key_ttl_hours)
    start = since or rec.window_start(current(), hours)
    try:
        result = gapfill.fill(current(), src, start)
    except providers.ProviderError as exc:
        raise click.ClickException(f"the provider's API could not be read: {exc}") from None
    if fmt == "json":
        click.echo(json.dumps(result.to_dict(), indent=2))
        return
    click.echo(f"source       {result.tenant}/{result.source} ({result.fetcher})")
    click.echo(f"since        {result.since.isoformat()}")
    click.echo(f"provider     {result.provider_ids} event(s)")
    click.echo(f"missing      {len(result.missing)}")
    for pid in result.missing:
        click.echo(f"  {pid}")
    click.echo(f"imported     {result.imported}")
    click.echo(f"redelivered  {result.redelivered}")


def _print_text(result: rec.ReconcileResult) -> None:
    click.echo(f"source    {result.tenant}/{result.source}")
    click.echo(f"since     {result.since.isoformat()}")
    click.echo(f"provider  {result.provider_ids} id(s), {result.matched} matched")
    click.echo(f"missing   {len(result.missing)} (the provider has them, the inbox does not)")
    for pid in result.missing:
        click.echo(f"  {pid}")
    click.echo(f"extra     {len(result.extra)} (the inbox has them, the provider's list does not)")
    for public_id in result.extra:
        click.echo(f"  {public_id}")
    if result.unkeyed:
        click.echo(f"unkeyed   {result.unkeyed} event(s) without a key in the window: not compared")
    click.echo(f"note      {rec.window_note(result.key_window_hours)}")
