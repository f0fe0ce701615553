"""``inbox lanes``: ordered lanes held by a quarantined event, and skipping one."""

from __future__ import annotations

import getpass

import click

from inbox.cli.base import current, main
from inbox.cli.output import emit_json, fields, json_option, table
from inbox.services import operations
from inbox.services.operations import Actor


@main.group()
def lanes() -> None:
    """Ordered lanes (sources with serialize_by_business_key): a quarantined event holds
    the events behind it until it is replayed (`inbox replay EVT`: it runs first,
    then the rest) or skipped (`inbox lanes skip EVT --reason R`)."""


@lanes.command("blocked")
@json_option
def blocked(as_json: bool) -> None:
    """The lanes held by a quarantined event, longest blocked first, with how many events
    wait behind each."""
    found = operations.blocked_lanes(current(), None)
    if as_json:
        emit_json([b.public() for b in found])
        return
    table(
        ["event", "tenant/source", "state", "held", "since", "error"],
        [
            (
                b.event,
                f"{b.tenant}/{b.source}",
                b.public()["state"],
                b.held,
                b.since,
                b.error_class or "",
            )
            for b in found
        ],
    )


@lanes.command("skip")
@click.argument("event", metavar="EVT")
@click.option("--reason", help="Why the lane may move on without it: audited (required).")
@click.option("--actor", default=getpass.getuser, show_default="current user")
@json_option
def skip(event: str, reason: str | None, actor: str, as_json: bool) -> None:
    """Let the lane of a quarantined event move on without it (it stays quarantined).
    With more events waiting behind it than INBOX_LANE_SKIP_APPROVAL_ABOVE, the first
    skip asks and a second operator's (another --actor) confirms."""
    done = operations.skip_lane(current(), Actor(actor), event, reason)
    if as_json:
        emit_json(done.public())
        return
    fields([(k.replace("_", " "), v) for k, v in done.public().items()])
    if done.status == "skip requested":
        click.echo(
            f"{done.held} events wait behind it: another operator confirms with\n"
            f"  inbox lanes skip {done.event} --actor NAME"
        )
