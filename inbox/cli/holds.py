"""``inbox holds``: place, list and release legal holds (retention keeps what they cover)."""

from __future__ import annotations

import getpass

import click

from inbox.cli.base import current, main, split_ref
from inbox.cli.output import emit_json, fields, json_option, table
from inbox.services import operations
from inbox.services.operations import Actor, Hold

_ACTOR = click.option(
    "--actor",
    default=getpass.getuser,
    show_default="current user",
    help="Who did it, as the audit log records it.",
)


@main.group()
def holds() -> None:
    """Legal holds: the events they cover, their bodies and their days are kept by
    retention while the hold stands. A tenant-wide hold is released by two operators."""


@holds.command("place")
@click.option("--tenant", help="Hold every event of this tenant.")
@click.option("--source", "ref", metavar="TENANT/SOURCE", help="Hold every event of a source.")
@click.option(
    "--business-key",
    "business_key",
    multiple=True,
    metavar="VALUE",
    help="With --tenant: hold the tenant's events with this business key (repeat for a"
    " key of several values, in the source's order).",
)
@click.option("--event", metavar="EVT", help="With --tenant: hold one event.")
@click.option("--reason", required=True, help="Why (a case or matter number): audited.")
@_ACTOR
@json_option
def place(
    tenant: str | None,
    ref: str | None,
    business_key: tuple[str, ...],
    event: str | None,
    reason: str,
    actor: str,
    as_json: bool,
) -> None:
    """Place a hold on a tenant, a source, a business key or an event."""
    source = None
    if ref is not None:
        if tenant is not None or business_key or event:
            raise click.UsageError("--source TENANT/SOURCE takes no other subject")
        tenant, source = split_ref(ref)
    if tenant is None:
        raise click.UsageError("give --tenant T (with --business-key or --event) or --source T/S")
    if business_key and event:
        raise click.UsageError("give one of --business-key and --event")
    hold = operations.place_hold(
        current(),
        Actor(actor),
        tenant,
        reason,
        source=source,
        business_key=list(business_key) or None,
        event=event,
    )
    _show(hold, as_json)


@holds.command("list")
@click.option("--all", "include_released", is_flag=True, help="Released holds too.")
@json_option
def list_holds(include_released: bool, as_json: bool) -> None:
    """The holds in force (with --all, released ones too)."""
    found = operations.list_holds(current(), None, include_released=include_released)
    if as_json:
        emit_json([h.public() for h in found])
        return
    table(
        ["id", "scope", "subject", "status", "placed_by", "placed_at", "reason"],
        [
            (h.public_id, h.scope, h.subject, h.status, h.placed_by, h.created_at, h.reason)
            for h in found
        ],
    )


@holds.command("release")
@click.argument("hold_id", metavar="HOLD")
@_ACTOR
@click.option("--withdraw", is_flag=True, help="Withdraw a waiting release request instead.")
@json_option
def release(hold_id: str, actor: str, withdraw: bool, as_json: bool) -> None:
    """Release a hold. A tenant-wide hold takes two operators: the first release asks for
    it, a second operator's release (another --actor) ends it."""
    hold = operations.release_hold(current(), Actor(actor), hold_id, withdraw=withdraw)
    _show(hold, as_json)
    if hold.status == "release requested" and not as_json:
        click.echo(
            f"a tenant-wide hold: another operator ends it with\n"
            f"  inbox holds release {hold.public_id} --actor NAME"
        )


def _show(hold: Hold, as_json: bool) -> None:
    if as_json:
        emit_json(hold.public())
        return
    fields([(k.replace("_", " "), v) for k, v in hold.public().items()])
