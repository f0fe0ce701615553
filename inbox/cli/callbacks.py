"""``inbox endpoints`` and ``inbox deliveries``: outbound callbacks from a shell."""

from __future__ import annotations

import getpass
from typing import Any

import click

from inbox.cli.base import check_named, current, main, ringing, transaction
from inbox.cli.output import emit_json, fields, json_option, table
from inbox.cli.params import LIMIT, Seconds
from inbox.domain import callbacks
from inbox.domain.errors import BadRequest, NotFound
from inbox.domain.records import Endpoint
from inbox.domain.states import DeliveryState
from inbox.services import operations
from inbox.services.operations import Actor
from inbox.store.reads import admin
from inbox.store.reads import endpoints as ereads

_ACTOR = click.option("--actor", default=getpass.getuser, show_default="current user")


@main.group()
def endpoints() -> None:
    """A tenant's callback endpoints (signed with Standard Webhooks)."""


def _record(ep: Endpoint, backlog: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    """What an operator may see of an endpoint: never its secrets, only how many are active;
    its backlog: deliveries waiting (pending or being sent) and held."""
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
        "active_secrets": len(ep.secrets),
        "failing": ep.failing,
        "filter": ep.filter,
        "paused": ep.paused,
        "waiting": backlog[0],
        "held": backlog[1],
    }


def _show(ep: Endpoint, as_json: bool = False, backlog: tuple[int, int] = (0, 0)) -> None:
    if as_json:
        emit_json(_record(ep, backlog))
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
            ("backlog", f"{backlog[0]} waiting, {backlog[1]} held"),
            ("attempts", f"{ep.max_attempts}, retry after {list(ep.retry_schedule)} s"),
            ("timeout", f"{ep.timeout_ms} ms, at most {ep.max_in_flight} in flight"),
            ("secrets", f"{len(ep.secrets)} active"),
        ]
    )


@endpoints.command("create")
@click.option("--tenant", required=True)
@click.option("--url", required=True)
@click.option("--event-types", help="Comma-separated; all types when omitted.")
@click.option("--max-attempts", type=click.IntRange(1, 50), default=4, show_default=True)
@click.option(
    "--retry-schedule",
    type=Seconds(),
    default="5,30,120",
    show_default=True,
    help="Seconds before each retry; the last repeats.",
)
@click.option("--timeout-ms", type=click.IntRange(100, 60_000), default=5000, show_default=True)
@click.option("--max-in-flight", type=click.IntRange(1, 64), default=4, show_default=True)
@click.option(
    "--filter",
    "filter_",
    help="A CEL expression over type and payload; other callbacks are not sent here.",
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
    )
    _show(ep)
    click.echo(f"secret    {secret}")


@endpoints.command("list")
@click.option("--tenant")
@json_option
def endpoints_list(tenant: str | None, as_json: bool) -> None:
    with transaction() as conn:
        check_named(conn, tenant)
        rows = operations.list_endpoints(conn, tenant)
        counts = ereads.backlogs(conn, [ep.id for ep in rows])
    if as_json:
        emit_json([_record(ep, counts.get(ep.id, (0, 0))) for ep in rows])
        return
    table(
        ["endpoint", "tenant", "enabled", "paused", "waiting", "held", "url"],
        [
            (ep.public_id, ep.tenant, ep.enabled, ep.paused, *counts.get(ep.id, (0, 0)), ep.url)
            for ep in rows
        ],
    )


@endpoints.command("show")
@click.argument("endpoint_id")
@json_option
def endpoints_show(endpoint_id: str, as_json: bool) -> None:
    with transaction() as conn:
        ep = operations.get_endpoint(conn, endpoint_id)
        _show(ep, as_json, ereads.backlogs(conn, [ep.id]).get(ep.id, (0, 0)))


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
@click.option("--state", type=click.Choice([s.value for s in DeliveryState]))
@click.option("--tenant")
@click.option("--limit", type=LIMIT, default=50, show_default=True)
@json_option
def deliveries_list(state: str | None, tenant: str | None, limit: int, as_json: bool) -> None:
    with transaction() as conn:
        check_named(conn, tenant)
        rows = admin.list_deliveries(
            conn, None, admin.Filter(tenant=tenant, state=state), limit, None
        )
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
    with transaction() as conn:
        detail = admin.delivery_detail(conn, delivery_id, None)
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
@click.option("--actor", default=getpass.getuser, show_default="current user")
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
