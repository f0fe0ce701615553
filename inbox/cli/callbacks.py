"""``inbox endpoints`` and ``inbox deliveries``: outbound callbacks from a shell."""

from __future__ import annotations

import getpass
from typing import Any

import click

from inbox.cli.base import current, main, ringing
from inbox.cli.output import emit_json, fields, json_option, table
from inbox.cli.params import LIMIT, Seconds
from inbox.domain import callbacks
from inbox.domain.endpoint_health import label
from inbox.domain.errors import BadRequest, NotFound
from inbox.domain.records import Endpoint
from inbox.domain.states import DeliveryState
from inbox.services import operations, reading
from inbox.services.operations import Actor
from inbox.store.reads import listing
from inbox.store.reads.endpoint_health import EndpointStatus

_ACTOR = click.option(
    "--actor",
    default=getpass.getuser,
    show_default="current user",
    help="Who did it, as the audit log records it.",
)


@main.group()
def endpoints() -> None:
    """A tenant's callback endpoints (signed with Standard Webhooks)."""


def _record(ep: Endpoint, status: EndpointStatus | None = None) -> dict[str, Any]:
    """What an operator may see of an endpoint: never its secrets, only how many are active;
    its state (``inbox.domain.endpoint_health``, as the console, the API and /metrics show
    it) and backlog: deliveries waiting (pending or being sent) and held."""
    shown = status.public() if status is not None else {}
    return {
        "endpoint": ep.public_id,
        "tenant": ep.tenant,
        "url": ep.url,
        "event_types": list(ep.event_types) if ep.event_types else None,
        "enabled": ep.enabled,
        "disabled_reason": ep.disabled_reason,
        "max_attempts": ep.max_attempts,
        "retry_schedule": list(ep.retry_schedule),
        "timeout_ms": ep.timeout_ms,
        "max_in_flight": ep.max_in_flight,
        "rate_per_second": ep.rate_per_second,
        "active_secrets": len(ep.secrets),
        "failing": ep.failing,
        "filter": ep.filter,
        "paused": ep.paused,
        "ordered": ep.ordered,
        "deleted": ep.deleted,
        "state": shown.get("state"),
        "circuit": shown.get("circuit"),
        "failure_rate": shown.get("failure_rate"),
        "waiting": shown.get("waiting", 0),
        "held": shown.get("held", 0),
        "held_oldest_age_seconds": shown.get("held_oldest_age_seconds", 0),
    }


def _show(ep: Endpoint, as_json: bool = False, status: EndpointStatus | None = None) -> None:
    if as_json:
        emit_json(_record(ep, status))
        return
    state = "yes" if ep.enabled else f"no ({ep.disabled_reason or 'disabled by an operator'})"
    fields(
        [
            ("endpoint", f"{ep.public_id}  ({ep.tenant})"),
            ("url", ep.url),
            ("types", ", ".join(ep.event_types) if ep.event_types else "all"),
            ("filter", ep.filter or "none"),
            ("enabled", state),
            ("paused", "yes (its deliveries are held)" if ep.paused else "no"),
            ("ordered", "yes (one in flight, in the order made)" if ep.ordered else "no"),
            *([("deleted", "yes (sent nothing, made nothing)")] if ep.deleted else []),
            *(
                [
                    ("state", label(status.state)),
                    ("backlog", f"{status.waiting} waiting, {status.held} held"),
                ]
                if status is not None
                else []
            ),
            ("attempts", f"{ep.max_attempts}, retry after {list(ep.retry_schedule)} s"),
            ("timeout", f"{ep.timeout_ms} ms, at most {ep.max_in_flight} in flight"),
            ("rate", f"{ep.rate_per_second:g}/s" if ep.rate_per_second else "no limit"),
            ("secrets", f"{len(ep.secrets)} active"),
        ]
    )


@endpoints.command("create")
@click.option("--tenant", required=True, help="The tenant whose callbacks it receives.")
@click.option("--url", required=True, help="Where callbacks are POSTed (https in production).")
@click.option("--event-types", help="Comma-separated; all types when omitted.")
@click.option(
    "--max-attempts",
    type=click.IntRange(1, 50),
    default=4,
    show_default=True,
    help="Attempts per delivery before it is a dead letter.",
)
@click.option(
    "--retry-schedule",
    type=Seconds(),
    default="5,30,120",
    show_default=True,
    help="Seconds before each retry; the last repeats.",
)
@click.option(
    "--timeout-ms",
    type=click.IntRange(100, 60_000),
    default=5000,
    show_default=True,
    help="How long one attempt may take, in milliseconds.",
)
@click.option(
    "--max-in-flight",
    type=click.IntRange(1, 64),
    default=4,
    show_default=True,
    help="Deliveries sent to it at the same time, at most.",
)
@click.option(
    "--filter",
    "filter_",
    help="A CEL expression over type and payload; other callbacks are not sent here.",
)
@click.option(
    "--ordered",
    is_flag=True,
    help="One delivery in flight; the next only once the previous is delivered or dead.",
)
def endpoints_create(
    tenant: str,
    url: str,
    event_types: str | None,
    max_attempts: int,
    retry_schedule: list[int],
    timeout_ms: int,
    max_in_flight: int,
    filter_: str | None,
    ordered: bool,
) -> None:
    """Create an endpoint and print its signing secret (shown once)."""
    secret = callbacks.new_secret()
    types = [t.strip() for t in event_types.split(",")] if event_types else None
    if types is not None and not all(types):
        raise click.BadParameter(f"{event_types!r}: an empty type", param_hint="--event-types")
    ep = operations.create_endpoint(
        current(),
        tenant,
        url,
        secret,
        types,
        max_attempts=max_attempts,
        retry_schedule=retry_schedule,
        timeout_ms=timeout_ms,
        max_in_flight=max_in_flight,
        filter=filter_,
        ordered=ordered,
    )
    _show(ep)
    click.echo(f"secret    {secret}")


@endpoints.command("list")
@click.option("--tenant", help="Only this tenant's endpoints.")
@click.option("--deleted", is_flag=True, help="Deleted endpoints too.")
@json_option
def endpoints_list(tenant: str | None, deleted: bool, as_json: bool) -> None:
    """Every endpoint (not the deleted ones, unless --deleted): its id, tenant, state,
    backlog and URL."""
    listed = reading.endpoint_listing(current(), tenant, deleted)
    rows, found = listed.rows, listed.statuses
    if as_json:
        emit_json([_record(ep, found.get(ep.id)) for ep in rows])
        return
    table(
        ["endpoint", "tenant", "state", "waiting", "held", "url"],
        [
            (
                ep.public_id,
                ep.tenant,
                "deleted" if ep.deleted else label(s.state),
                s.waiting,
                s.held,
                ep.url,
            )
            for ep in rows
            if (s := found.get(ep.id)) is not None
        ],
    )


@endpoints.command("show")
@click.argument("endpoint_id")
@json_option
def endpoints_show(endpoint_id: str, as_json: bool) -> None:
    """One endpoint: URL, event types, filter, state, retries, limits, active secrets (a count)."""
    ep, status = reading.endpoint_shown(current(), endpoint_id)
    _show(ep, as_json, status)


@endpoints.command("rotate")
@click.argument("endpoint_id")
@click.option("--secret", help="With --finish: the secret to keep.")
@click.option("--finish", is_flag=True, help="End the overlap: keep only --secret.")
@_ACTOR
def endpoints_rotate(endpoint_id: str, secret: str | None, finish: bool, actor: str) -> None:
    """Add a secret (every active secret signs during the overlap), or --finish --secret S.

    The same spelling as ``inbox sources rotate``. New endpoint secrets are always generated
    (whsec_, 24 random bytes), so --secret is only for --finish.
    """
    if secret and not finish:
        raise click.UsageError("--secret goes with --finish (new secrets are generated).")
    if finish:
        if not secret:
            raise click.UsageError("--finish needs --secret (the one to keep).")
        revoked = operations.finish_endpoint_rotation(
            current(), Actor(actor), endpoint_id, keep=secret
        )
        click.echo(f"revoked {revoked} secret(s)")
        return
    new = operations.rotate_endpoint_secret(current(), Actor(actor), endpoint_id)
    click.echo(f"secret    {new}")


@main.group()
def deliveries() -> None:
    """Outbound deliveries and their dead letters."""


@deliveries.command("list")
@click.option(
    "--state",
    type=click.Choice([s.value for s in DeliveryState]),
    help="Only deliveries in this state.",
)
@click.option("--tenant", help="Only this tenant's deliveries.")
@click.option("--limit", type=LIMIT, default=50, show_default=True, help="At most this many.")
@json_option
def deliveries_list(state: str | None, tenant: str | None, limit: int, as_json: bool) -> None:
    """The newest outbound deliveries first (times in UTC)."""
    f = listing.Filter(tenant=tenant, state=state)
    rows = reading.list_deliveries(current(), None, f, limit, None, check_names=True)
    if as_json:
        emit_json([d.public() for d in rows])
        return
    table(
        ["delivery", "tenant", "endpoint", "type", "state", "attempts", "created", "last error"],
        [
            (
                d.public_id,
                d.tenant,
                d.endpoint,
                d.event_type,
                d.state,
                d.attempts,
                d.created_at,
                d.last_error,
            )
            for d in rows
        ],
    )


@deliveries.command("show")
@click.argument("delivery_id")
@json_option
def deliveries_show(delivery_id: str, as_json: bool) -> None:
    """One delivery: its endpoint, event, state and every attempt with its answer."""
    detail = reading.delivery_detail(current(), delivery_id, None)
    if detail is None:
        raise NotFound(f"No delivery {delivery_id}.")
    if as_json:
        emit_json(detail.public())
        return
    fields(
        [
            ("delivery", detail.public_id),
            ("endpoint", f"{detail.endpoint}  {detail.url}"),
            ("type", detail.event_type),
            ("state", detail.state),
            ("attempts", detail.attempts),
            ("created", detail.created_at),
            ("finished", detail.finished_at),
            ("last status", detail.last_status),
            ("last error", detail.last_error),
        ]
    )
    if detail.attempts_log:
        click.echo("\nattempts:")
        table(
            ["at", "status", "error", "latency ms", "excerpt"],
            [(a.at, a.status, a.error_class, a.latency_ms, a.excerpt) for a in detail.attempts_log],
        )
    if detail.audit:
        click.echo("\naudit:")
        table(["at", "actor", "action"], [(a.at, a.actor, a.action) for a in detail.audit])


@deliveries.command("replay")
@click.argument("ids", nargs=-1, required=True)
@_ACTOR
def deliveries_replay(ids: tuple[str, ...], actor: str) -> None:
    """Send dead letters again, with the same webhook-id."""
    done = operations.replay_deliveries(ringing(), Actor(actor), ids)
    if done.rung == "no bell":
        click.echo("(no broker configured: the next sweep will send them)")
    elif done.rung == "failed":
        click.echo("(the broker did not answer: the next sweep will send them)")
    click.echo(f"replayed {len(done.moved)} of {len(ids)}")
    if len(done.moved) < len(ids):
        raise BadRequest(f"{len(ids) - len(done.moved)} of the deliveries named had not failed")
