"""``inbox migrate``, ``inbox tenants`` and ``inbox sources``."""

from __future__ import annotations

import json
import secrets as pysecrets

import click

from inbox.cli.base import main, split_ref, transaction
from inbox.domain.records import Source
from inbox.domain.signatures import SCHEMES
from inbox.domain.sources import SourceOptions
from inbox.infra.config import Settings
from inbox.store import sources as store


@main.command()
def migrate() -> None:
    """Apply the database migrations."""
    from inbox.store import migrate as mig

    mig.upgrade(Settings.from_env().database_url)
    click.echo("migrated to head")


@main.group()
def tenants() -> None:
    """Tenants: each owns sources, events and endpoints."""


@tenants.command("create")
@click.argument("name")
def tenants_create(name: str) -> None:
    with transaction() as conn:
        t = store.create_tenant(conn, name)
    click.echo(f"tenant {t.name} created (id {t.id})")


@tenants.command("list")
def tenants_list() -> None:
    with transaction() as conn:
        for t in store.list_tenants(conn):
            click.echo(f"{t.name}{'  (disabled)' if t.disabled else ''}")


def _public_base() -> str:
    import os

    return os.environ.get("INBOX_PUBLIC_URL", "http://127.0.0.1:8000").rstrip("/")


def _show(src: Source) -> None:
    scheme = SCHEMES[src.scheme]
    click.echo(f"source   {src.tenant}/{src.name}")
    click.echo(f"url      {_public_base()}{src.path}")
    click.echo(f"scheme   {src.scheme}")
    click.echo(f"enabled  {'yes' if src.enabled else 'no'}")
    click.echo(f"secrets  {len(src.secrets)} active")
    click.echo(f"options  {json.dumps(src.options.to_dict(), sort_keys=True)}")
    if getattr(scheme, "insecure", False):
        click.secho("WARNING  scheme 'none': anyone who knows the URL can post events.", fg="red")


@main.group()
def sources() -> None:
    """Sources: one provider endpoint of one tenant, at /hooks/<tenant>/<source>."""


@sources.command("create")
@click.option("--tenant", required=True)
@click.option("--name", required=True)
@click.option("--scheme", required=True, type=click.Choice(sorted(SCHEMES)))
@click.option("--secret", "secrets", multiple=True, help="Repeat for several active secrets.")
@click.option(
    "--option",
    "options",
    multiple=True,
    metavar="KEY=JSON",
    help="A source option, e.g. --option tolerance=600 "
    "--option 'business_key_paths=[\"data.object.id\"]'.",
)
def sources_create(
    tenant: str, name: str, scheme: str, secrets: tuple[str, ...], options: tuple[str, ...]
) -> None:
    """Create a source and print its URL."""
    if scheme != "none" and not secrets:
        raise click.UsageError("--secret is required (scheme 'none' is the only exception).")
    opts = SourceOptions.from_dict(_parse_options(options))
    with transaction() as conn:
        src = store.create_source(conn, tenant, name, scheme, list(secrets), opts)
    _show(src)


def _parse_options(pairs: tuple[str, ...]) -> dict[str, object]:
    out: dict[str, object] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep:
            raise click.UsageError(f"--option {pair!r}: expected KEY=VALUE")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    return out


@sources.command("list")
@click.option("--tenant")
def sources_list(tenant: str | None) -> None:
    with transaction() as conn:
        for src in store.list_sources(conn, tenant):
            state = "" if src.enabled else "  (disabled)"
            click.echo(f"{src.tenant}/{src.name}  {src.scheme}  {src.path}{state}")


@sources.command("show")
@click.argument("ref", metavar="TENANT/SOURCE")
def sources_show(ref: str) -> None:
    with transaction() as conn:
        _show(store.get_source(conn, *split_ref(ref)))


@sources.command("rotate")
@click.argument("ref", metavar="TENANT/SOURCE")
@click.option("--secret", help="The new secret (generated when omitted).")
@click.option("--finish", is_flag=True, help="End the overlap: keep only --secret.")
def sources_rotate(ref: str, secret: str | None, finish: bool) -> None:
    """Add a secret (both verify during the overlap), or --finish to drop the others."""
    with transaction() as conn:
        src = store.get_source(conn, *split_ref(ref))
        if finish:
            if not secret:
                raise click.UsageError("--finish needs --secret (the one to keep).")
            n = store.revoke_secrets_except(conn, src, secret)
            click.echo(f"revoked {n} secret(s)")
            return
        new = secret or _generate_secret(src.scheme)
        store.add_secret(conn, src, new)
    click.echo(f"added secret {new}" if not secret else "added secret")


def _generate_secret(scheme: str) -> str:
    import base64

    raw = pysecrets.token_bytes(24)
    if scheme == "standard":
        return "whsec_" + base64.b64encode(raw).decode()
    return raw.hex()


def _set_enabled(ref: str, enabled: bool) -> None:
    with transaction() as conn:
        store.set_enabled(conn, store.get_source(conn, *split_ref(ref)), enabled)
    click.echo("enabled" if enabled else "disabled")


@sources.command("disable")
@click.argument("ref", metavar="TENANT/SOURCE")
def sources_disable(ref: str) -> None:
    """Stop accepting events (the URL answers 404)."""
    _set_enabled(ref, False)


@sources.command("enable")
@click.argument("ref", metavar="TENANT/SOURCE")
def sources_enable(ref: str) -> None:
    _set_enabled(ref, True)
