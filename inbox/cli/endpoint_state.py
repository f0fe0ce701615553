"""``inbox endpoints disable|enable|pause|resume|discard|limit|order|delete``: an
endpoint's state, and what it holds. Nothing is dropped: a paused or disabled endpoint's
deliveries are held, and a delete asks what becomes of them."""

from __future__ import annotations

import getpass

import click

from inbox.cli.base import current, ringing
from inbox.cli.callbacks import endpoints
from inbox.cli.params import Rate
from inbox.services import endpoint_delete, endpoint_state
from inbox.services.endpoint_state import Changed

_ACTOR = click.option("--actor", default=getpass.getuser, show_default="current user")


def _say(done: Changed, word: str) -> None:
    if done.sends:
        click.echo(f"{word}: {done.released} held deliveries released, in their original order")
    else:
        click.echo(f"{word}: nothing is sent to it; {done.held} more deliveries held")


@endpoints.command("disable")
@click.argument("endpoint_id")
@_ACTOR
def endpoints_disable(endpoint_id: str, actor: str) -> None:
    """Send nothing to it (audited); its deliveries wait, held, until it is enabled."""
    _say(endpoint_state.set_enabled(current(), actor, None, endpoint_id, False), "disabled")


@endpoints.command("enable")
@click.argument("endpoint_id")
@_ACTOR
def endpoints_enable(endpoint_id: str, actor: str) -> None:
    """Send to it again (audited); its held deliveries go out in their original order."""
    _say(endpoint_state.set_enabled(ringing(), actor, None, endpoint_id, True), "enabled")


@endpoints.command("pause")
@click.argument("endpoint_id")
@_ACTOR
def endpoints_pause(endpoint_id: str, actor: str) -> None:
    """Stop sending for now (audited); its deliveries wait, held, until it is resumed."""
    _say(endpoint_state.set_paused(current(), actor, None, endpoint_id, True), "paused")


@endpoints.command("resume")
@click.argument("endpoint_id")
@_ACTOR
def endpoints_resume(endpoint_id: str, actor: str) -> None:
    """Send again after a pause (audited); its held deliveries go out in their original order."""
    _say(endpoint_state.set_paused(ringing(), actor, None, endpoint_id, False), "resumed")


@endpoints.command("discard")
@click.argument("endpoint_id")
@click.option("--reason", help="Why (kept in the audit log of each delivery); required to ask.")
@click.option("--approve", is_flag=True, help="Approve the discard another operator asked for.")
@click.option("--withdraw", is_flag=True, help="Withdraw the discard waiting for approval.")
@_ACTOR
def endpoints_discard(
    endpoint_id: str, reason: str | None, approve: bool, withdraw: bool, actor: str
) -> None:
    """Discard its held deliveries instead of sending them: each becomes a dead letter
    (a replay can still send it), audited with the reason. More than
    INBOX_HELD_DISCARD_APPROVAL_MIN of them wait for a second operator's --approve."""
    if approve and withdraw:
        raise click.UsageError("--approve or --withdraw, not both.")
    rt = current()
    if approve:
        done = endpoint_state.approve_discard(rt, actor, None, endpoint_id)
    elif withdraw:
        done = endpoint_state.withdraw_discard(rt, actor, None, endpoint_id)
    else:
        done = endpoint_state.discard_held(rt, actor, None, endpoint_id, reason)
    if done.status == "awaiting":
        click.echo(
            f"discard {done.public_id} of {done.held} held deliveries awaits a second operator"
            f" (inbox endpoints discard {endpoint_id} --approve)"
        )
    elif done.status == "withdrawn":
        click.echo(f"discard {done.public_id} withdrawn: nothing discarded")
    else:
        click.echo(f"discarded {done.discarded} held deliveries ({done.public_id})")


@endpoints.command("limit")
@click.argument("endpoint_id")
@click.option(
    "--rate",
    type=Rate(10_000),
    help="Messages a second to it, across every courier process.",
)
@click.option("--no-rate", is_flag=True, help="No rate limit.")
@click.option("--max-in-flight", type=click.IntRange(1, 64), help="Deliveries sent to it at once.")
@_ACTOR
def endpoints_limit(
    endpoint_id: str, rate: float | None, no_rate: bool, max_in_flight: int | None, actor: str
) -> None:
    """Throttle it (audited): a rate and an in-flight limit that hold across every courier
    process. The backlog waits; nothing is dropped."""
    if rate is not None and no_rate:
        raise click.UsageError("--rate or --no-rate, not both.")
    if rate is None and not no_rate and max_in_flight is None:
        raise click.UsageError("Say --rate, --no-rate or --max-in-flight.")
    wanted: float | str | None = None if no_rate else ("keep" if rate is None else rate)
    ep = endpoint_state.set_limits(
        ringing(), actor, None, endpoint_id, rate=wanted, max_in_flight=max_in_flight
    )
    shown = f"{ep.rate_per_second:g}/s" if ep.rate_per_second else "no rate limit"
    click.echo(f"limits: {shown}, at most {ep.max_in_flight} in flight")


@endpoints.command("order")
@click.argument("endpoint_id")
@click.option(
    "--on/--off",
    "ordered",
    required=True,
    help="Ordered: one delivery in flight, the next only once the previous is delivered"
    " or dead (in the order they were made), across every courier process.",
)
@_ACTOR
def endpoints_order(endpoint_id: str, ordered: bool, actor: str) -> None:
    """Deliver to it in order, one at a time (audited), or freely again."""
    ep = endpoint_state.set_ordered(ringing(), actor, None, endpoint_id, ordered)
    click.echo("ordered: one in flight, in the order made" if ep.ordered else "not ordered")


@endpoints.command("delete")
@click.argument("endpoint_id")
@click.option(
    "--held",
    type=click.Choice(["discard"]),
    help="What becomes of its held and waiting deliveries: discard them (each a dead"
    " letter, audited). Required when it has any. There is no release: a deleted endpoint"
    " is sent nothing (enable it and delete it later to send them).",
)
@click.option("--reason", help="With --held discard: why (kept in the audit log).")
@_ACTOR
def endpoints_delete(endpoint_id: str, held: str | None, reason: str | None, actor: str) -> None:
    """Delete it (audited): it is sent nothing and gets no new deliveries, and it leaves
    the listings; its row stays, so deliveries, audit and evidence keep referring to it.
    Refused while deliveries are being sent to it, and while it has held or waiting ones
    unless --held discard --reason R: past INBOX_HELD_DISCARD_APPROVAL_MIN the discard waits
    for a second operator's ``inbox endpoints discard --approve``, and the endpoint is
    disabled until then and deleted with it."""
    done = endpoint_delete.delete_endpoint(current(), actor, None, endpoint_id, held, reason)
    if done.deleted:
        gone = f"; {done.discard.discarded} held deliveries discarded" if done.discard else ""
        click.echo(f"deleted {done.endpoint}{gone}")
    else:
        assert done.discard is not None
        click.echo(
            f"{done.endpoint} disabled; discard {done.discard.public_id} of"
            f" {done.discard.held} held deliveries awaits a second operator"
            f" (inbox endpoints discard {endpoint_id} --approve), then it is deleted"
        )
