"""The ``inbox`` command group and what its command groups share."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click
from sqlalchemy import Connection

from inbox.domain.errors import InboxError
from inbox.infra.config import Settings
from inbox.store.engine import make_engine


@contextmanager
def transaction() -> Iterator[Connection]:
    engine = make_engine(Settings.from_env(), pool_size=1)
    try:
        with engine.begin() as conn:
            yield conn
    finally:
        engine.dispose()


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except InboxError as exc:
            raise click.ClickException(exc.message) from None


@click.group(cls=_Group)
def main() -> None:
    """Webhook Inbox: exactly-once decisions from at-least-once webhooks."""


def split_ref(ref: str) -> tuple[str, str]:
    tenant, sep, name = ref.partition("/")
    if not sep or not tenant or not name:
        raise click.UsageError("expected TENANT/SOURCE")
    return tenant, name
