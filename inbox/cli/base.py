"""The ``inbox`` command group and what its command groups share.

Every failure an operator can meet from a shell is one line that says how to fix it: a
missing ``DATABASE_URL``, a database that does not answer, a schema that was never migrated,
and every ``InboxError`` the store raises; never a traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata

import click
import psycopg
from sqlalchemy import Connection, Engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError

from inbox.domain.errors import InboxError
from inbox.infra.config import Settings
from inbox.store.db.engine import make_engine, sqlalchemy_url

EXAMPLE_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def settings() -> Settings:
    """The environment's settings; a missing DATABASE_URL is a one-line error with the fix."""
    found = Settings.from_env()
    if not found.database_url:
        raise click.ClickException(
            f"DATABASE_URL is not set: export it, for example export DATABASE_URL={EXAMPLE_URL}"
        )
    return found


def engine(pool_size: int = 1) -> Engine:
    return make_engine(settings(), pool_size=pool_size)


@contextmanager
def transaction() -> Iterator[Connection]:
    eng = engine()
    try:
        with eng.begin() as conn:
            yield conn
    finally:
        eng.dispose()


def _database() -> str:
    """DATABASE_URL without its password, to name in an error."""
    try:
        url = make_url(sqlalchemy_url(Settings.from_env().database_url))
        return url.render_as_string(hide_password=True)
    except (ArgumentError, ValueError, RuntimeError):
        return "DATABASE_URL"


def explain(exc: DBAPIError) -> str:
    """One line for a database error: what is wrong and what to do."""
    cause = exc.orig
    if isinstance(cause, psycopg.errors.UndefinedTable | psycopg.errors.UndefinedColumn):
        return "the schema is not migrated (or is behind this version): run inbox migrate"
    if isinstance(cause, psycopg.OperationalError):
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        return f"cannot reach the database at {_database()}: {first}"
    if isinstance(cause, psycopg.errors.DataError):
        return f"the database refused a value: {str(cause).strip().splitlines()[0]}"
    return f"database error ({type(cause).__name__ if cause else type(exc).__name__})"


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except InboxError as exc:
            raise click.ClickException(_with_fields(exc)) from None
        except DBAPIError as exc:
            raise click.ClickException(explain(exc)) from None
        except psycopg.OperationalError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else "no answer"
            raise click.ClickException(
                f"cannot reach the database at {_database()}: {first}"
            ) from None


def _with_fields(exc: InboxError) -> str:
    details = exc.extra.get("fields")
    if not isinstance(details, dict) or not details:
        return exc.message
    parts = [f"{name}: {v}" for name, v in sorted(details.items())]
    return f"{exc.message} ({'; '.join(parts)})"


@click.group(cls=_Group)
@click.version_option(metadata.version("webhook-inbox"), prog_name="inbox")
def main() -> None:
    """Webhook Inbox: exactly-once decisions from at-least-once webhooks."""


def split_ref(ref: str) -> tuple[str, str]:
    tenant, sep, name = ref.partition("/")
    if not sep or not tenant or not name:
        raise click.UsageError("expected TENANT/SOURCE")
    return tenant, name
