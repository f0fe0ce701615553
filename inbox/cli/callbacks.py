"""``inbox endpoints`` and ``inbox deliveries``: outbound callbacks from a shell."""

from __future__ import annotations

import getpass
import json

import click

from inbox.cli.base import main, transaction
from inbox.domain import callbacks
from inbox.domain.records import Endpoint
from inbox.store import deliveries as dstore
from inbox.store import endpoints as store


@main.group()
def endpoints() -> None:
    """A tenant's callback endpoints (signed with Standard Webhooks)."""


def _show(ep: Endpoint) -> None:
    click.echo(f"endpoint  {ep.public_id}  ({ep.tenant})")
    click.echo(f"url       {ep.url}")
    click.echo(f"types     {', '.join(ep.event_types) if ep.event_types else 'all'}")
    state = "yes" if ep.enabled else f"no ({ep.disabled_reason or 'disabled by an operator'})"
    click.echo(f"enabled   {state}")
    click.echo(f"attempts  {ep.max_attempts}, retry after {list(ep.retry_schedule)} s")
    click.echo(f"timeout   {ep.timeout_ms} ms, at most {ep.max_in_flight} in flight")
    click.echo(f"secrets   {len(ep.secrets)} active")


@endpoints.command("create")
@click.option("--tenant", required=True)
@click.option("--url", required=True)
@click.option("--event-types", help="Comma-separated; all types when omitted.")
@click.option("--max-attempts", type=click.IntRange(1, 50), default=4, show_default=True)
@click.option(
    "--retry-schedule",
    default="5,30,120",
    show_default=True,
    help="Seconds before each retry; the last repeats.",
)
@click.option("--timeout-ms", type=click.IntRange(100, 60_000), default=5000, show_default=True)
@click.option("--max-in-flight", type=click.IntRange(1, 64), default=4, show_default=True)
def endpoints_create(
    tenant: str,
    url: str,
    event_types: str | None,
    max_attempts: int,
    retry_schedule: str,
    timeout_ms: int,
    max_in_flight: int,
) -> None:
    """Create an endpoint and print its signing secret (shown once)."""
    secret = callbacks.new_secret()
    schedule = [int(s) for s in retry_schedule.split(",") if s.strip()]
    types = [t.strip() for t in event_types.split(",")] if event_types else None
    with transaction() as conn:
        ep = store.create_endpoint(
            conn,
            tenant,
            url,
            secret,
            types,
            max_attempts=max_attempts,
            retry_schedule=schedule,
            timeout_ms=timeout_ms,
            max_in_flight=max_in_flight,
        )
    _show(ep)
    click.echo(f"secret    {secret}")


@endpoints.command("list")
@click.option("--tenant")
def endpoints_list(tenant: str | None) -> None:
    with transaction() as conn:
        for ep in store.list_endpoints(conn, tenant):
            click.echo(
                f"{ep.public_id}  {ep.tenant}  {ep.url}{'' if ep.enabled else '  (disabled)'}"
            )


@endpoints.command("show")
@click.argument("endpoint_id")
def endpoints_show(endpoint_id: str) -> None:
    with transaction() as conn:
        _show(store.get_endpoint(conn, endpoint_id))


@endpoints.command("rotate")
@click.argument("endpoint_id")
@click.option("--finish", "keep", metavar="SECRET", help="End the overlap: keep only SECRET.")
def endpoints_rotate(endpoint_id: str, keep: str | None) -> None:
    """Add a secret (every active secret signs during the overlap), or end the overlap."""
    with transaction() as conn:
        ep = store.get_endpoint(conn, endpoint_id)
        if keep:
            click.echo(f"revoked {store.revoke_secrets_except(conn, ep, keep)} secret(s)")
            return
        secret = callbacks.new_secret()
        store.add_secret(conn, ep, secret)
    click.echo(f"secret    {secret}")


def _set_enabled(endpoint_id: str, enabled: bool) -> None:
    with transaction() as conn:
        ep = store.get_endpoint(conn, endpoint_id)
        store.set_enabled(conn, ep.id, enabled, "disabled by an operator")
    click.echo("enabled" if enabled else "disabled")


@endpoints.command("disable")
@click.argument("endpoint_id")
def endpoints_disable(endpoint_id: str) -> None:
    _set_enabled(endpoint_id, False)


@endpoints.command("enable")
@click.argument("endpoint_id")
def endpoints_enable(endpoint_id: str) -> None:
    _set_enabled(endpoint_id, True)


@main.group()
def deliveries() -> None:
    """Outbound deliveries and their dead letters."""


@deliveries.command("list")
@click.option("--state", type=click.Choice(["pending", "sending", "delivered", "failed"]))
@click.option("--tenant")
@click.option("--limit", default=50, show_default=True)
def deliveries_list(state: str | None, tenant: str | None, limit: int) -> None:
    with transaction() as conn:
        for d in dstore.list_deliveries(conn, state, tenant, limit):
            click.echo(
                f"{d['public_id']}  {d['tenant']}  {d['endpoint']}  {d['event_type']:<16}"
                f" {d['state']:<9} attempts={d['attempts']}  {d['last_error'] or ''}"
            )


@deliveries.command("show")
@click.argument("delivery_id")
def deliveries_show(delivery_id: str) -> None:
    with transaction() as conn:
        detail = dstore.delivery_detail(conn, delivery_id)
    if detail is None:
        raise click.ClickException(f"no delivery {delivery_id}")
    click.echo(json.dumps(detail, indent=2, default=str))


@deliveries.command("replay")
@click.argument("ids", nargs=-1, required=True)
@click.option("--actor", default=getpass.getuser, show_default="current user")
def deliveries_replay(ids: tuple[str, ...], actor: str) -> None:
    """Send dead letters again, with the same webhook-id."""
    with transaction() as conn:
        moved = dstore.replay(conn, list(ids), actor)
    _ring({endpoint for _, endpoint in moved})
    click.echo(f"replayed {len(moved)} of {len(ids)}")


def _ring(endpoint_ids: set[int]) -> None:
    """Best effort: the sweeper rings for due deliveries anyway."""
    if not endpoint_ids:
        return
    from inbox.infra import broker
    from inbox.infra.config import Settings

    ring = broker.rings(Settings.from_env()).ring_couriers
    if ring is None:
        click.echo("(no broker configured: the next sweep will send them)")
        return
    try:
        ring(endpoint_ids)
    except Exception:  # the broker is unreachable
        click.echo("(the broker did not answer: the next sweep will send them)")
