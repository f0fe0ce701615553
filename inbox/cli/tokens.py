"""``inbox tokens``: bearer tokens for the admin API (``/api/v1``)."""

from __future__ import annotations

import click

from inbox.cli.base import current, main
from inbox.cli.output import emit_json, json_option, table
from inbox.domain.tokens import ROLES
from inbox.services import admin


@main.group()
def tokens() -> None:
    """Bearer tokens for the admin API; stored only as digests."""


@tokens.command("create")
@click.option("--name", required=True, help="Unique; recorded as the actor in the audit log.")
@click.option(
    "--role", required=True, type=click.Choice(ROLES), help="What it may do (viewer reads only)."
)
@click.option("--tenant", help="Limit the token to one tenant (default: every tenant).")
def tokens_create(name: str, role: str, tenant: str | None) -> None:
    """Create a token and print it (shown once: only its digest is kept)."""
    tok, secret = admin.create_token(current(), name, role, tenant)
    click.echo(f"token {tok.name} ({tok.role}, {tok.tenant or 'all tenants'}) created")
    click.echo(secret)


@tokens.command("list")
@json_option
def tokens_list(as_json: bool) -> None:
    """Every token (never its secret: only digests are kept)."""
    rows = admin.list_tokens(current())
    records = [
        {
            "name": t.name,
            "role": t.role,
            "tenant": t.tenant,
            "created_at": t.created_at,
            "last_used_at": t.last_used_at,
            "revoked_at": t.revoked_at,
        }
        for t in rows
    ]
    if as_json:
        emit_json(records)
        return
    table(
        ["name", "role", "tenant", "created", "last used", "revoked"],
        [
            (
                r["name"],
                r["role"],
                r["tenant"] or "*",
                r["created_at"],
                r["last_used_at"],
                r["revoked_at"],
            )
            for r in records
        ],
    )


@tokens.command("revoke")
@click.argument("name")
def tokens_revoke(name: str) -> None:
    """Revoke a token at once; requests carrying it get 401."""
    if not admin.revoke_token(current(), name):
        raise click.ClickException(f"no live token named {name}")
    click.echo(f"token {name} revoked")
