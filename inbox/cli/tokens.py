"""``inbox tokens``: bearer tokens for the admin API (``/api/v1``)."""

from __future__ import annotations

import click

from inbox.cli.base import main, transaction
from inbox.domain.tokens import ROLES
from inbox.store import tokens as store


@main.group()
def tokens() -> None:
    """Bearer tokens for the admin API; stored only as digests."""


@tokens.command("create")
@click.option("--name", required=True, help="Unique; recorded as the actor in the audit log.")
@click.option("--role", required=True, type=click.Choice(ROLES))
@click.option("--tenant", help="Limit the token to one tenant (default: every tenant).")
def tokens_create(name: str, role: str, tenant: str | None) -> None:
    """Create a token and print it (shown once: only its digest is kept)."""
    with transaction() as conn:
        tok, secret = store.create_token(conn, name, role, tenant)
    click.echo(f"token {tok.name} ({tok.role}, {tok.tenant or 'all tenants'}) created")
    click.echo(secret)


@tokens.command("list")
def tokens_list() -> None:
    with transaction() as conn:
        rows = store.list_tokens(conn)
    for t in rows:
        used = f"{t.last_used_at:%Y-%m-%d %H:%M}" if t.last_used_at else "never"
        revoked = f"  revoked {t.revoked_at:%Y-%m-%d %H:%M}" if t.revoked_at else ""
        click.echo(
            f"{t.name:<20} {t.role:<9} {t.tenant or '*':<16}"
            f" created {t.created_at:%Y-%m-%d %H:%M}  last used {used}{revoked}"
        )


@tokens.command("revoke")
@click.argument("name")
def tokens_revoke(name: str) -> None:
    """Revoke a token at once; requests carrying it get 401."""
    with transaction() as conn:
        if not store.revoke(conn, name):
            raise click.ClickException(f"no live token named {name}")
    click.echo(f"token {name} revoked")
