"""``inbox events`` and ``inbox replay``: what operators use from a shell."""

from __future__ import annotations

import getpass
import json
import time
from datetime import datetime

import click

from inbox.cli.base import main, transaction
from inbox.store import operator


@main.group()
def events() -> None:
    """Find events and see what happened to them."""


@events.command("list")
@click.option("--state", type=click.Choice(["received", "processing", "completed", "quarantined"]))
@click.option("--tenant")
@click.option("--source")
@click.option("--limit", default=50, show_default=True)
def events_list(state: str | None, tenant: str | None, source: str | None, limit: int) -> None:
    with transaction() as conn:
        rows = operator.list_events(conn, state, tenant, source, limit=limit)
    for r in rows:
        click.echo(
            f"{r.public_id}  {r.tenant}/{r.source}  {r.event_type or '-':<20} {r.state:<11}"
            f" attempts={r.attempts}  {r.received_at:%Y-%m-%d %H:%M:%S}"
            f"{'  ' + r.last_error_class if r.last_error_class else ''}"
        )


@events.command("show")
@click.argument("public_id")
def events_show(public_id: str) -> None:
    """One event: state, attempts, errors, steps with results, duplicates, conflicts, audit."""
    with transaction() as conn:
        detail = operator.event_detail(conn, public_id)
    if detail is None:
        raise click.ClickException(f"no event {public_id}")
    click.echo(json.dumps(detail, indent=2, default=str))


@main.command()
@click.argument("ids", nargs=-1)
@click.option("--quarantined", is_flag=True, help="Replay quarantined events by filter.")
@click.option("--tenant")
@click.option("--source")
@click.option("--since", type=click.DateTime(), help="Received at or after this time.")
@click.option("--rate", type=float, default=50.0, show_default=True, help="Events per second.")
@click.option("--dry-run", is_flag=True)
@click.option("--actor", default=getpass.getuser, show_default="current user")
def replay(
    ids: tuple[str, ...],
    quarantined: bool,
    tenant: str | None,
    source: str | None,
    since: datetime | None,
    rate: float,
    dry_run: bool,
    actor: str,
) -> None:
    """Move quarantined events back to received; completed steps are kept."""
    if ids and quarantined:
        raise click.UsageError("give event ids or --quarantined, not both")
    if quarantined and not tenant:
        raise click.UsageError("--quarantined needs --tenant")
    if not ids and not quarantined:
        raise click.UsageError("give event ids, or --quarantined --tenant T")
    targets = list(ids)
    if quarantined:
        with transaction() as conn:
            targets = [
                r.public_id
                for r in operator.list_events(conn, "quarantined", tenant, source, since, 1_000_000)
            ]
    if dry_run:
        click.echo(f"would replay {len(targets)} event(s)")
        for t in targets[:20]:
            click.echo(f"  {t}")
        return
    moved = 0
    with click.progressbar(targets, label="replaying", show_pos=True) as bar:
        for public_id in bar:
            started = time.monotonic()
            with transaction() as conn:
                moved += len(operator.replay(conn, [public_id], actor))
            time.sleep(max(0.0, 1.0 / rate - (time.monotonic() - started)))
    click.echo(f"replayed {moved} of {len(targets)} (others were no longer quarantined)")
