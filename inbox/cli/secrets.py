"""``inbox secrets``: the key-encryption key of the stored signing secrets."""

from __future__ import annotations

import click

from inbox.cli.base import current, main
from inbox.infra import keyring as kr
from inbox.services import admin


@main.group()
def secrets() -> None:
    """Signing secrets are stored encrypted with INBOX_KEK (Fernet keys, newest first)."""


@secrets.command("keygen")
def secrets_keygen() -> None:
    """Print a new key. To rotate: put it first in INBOX_KEK (keep the old ones after it),
    restart every process, run `inbox secrets reencrypt`, then drop the old keys."""
    click.echo(kr.new_key())


@secrets.command("reencrypt")
def secrets_reencrypt() -> None:
    """Rewrite every stored secret, and rewrap every payload data key, under the first key
    of INBOX_KEK (sealed payloads are not rewritten: their data keys keep their value)."""
    ring = kr.keyring()
    done = admin.reencrypt(current(), ring)
    for d in done:
        note = f" ({d.was_clear} were in clear)" if d.was_clear else ""
        click.echo(f"{d.table}: {d.rewritten} of {d.total} re-encrypted{note}")
