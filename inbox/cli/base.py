"""The ``inbox`` command group and what its command groups share.

Every failure an operator can meet from a shell is one line that says how to fix it: a
missing ``DATABASE_URL``, a database that does not answer, a schema that was never migrated,
and every ``InboxError`` the store raises; never a traceback.
"""

from __future__ import annotations

import dataclasses
import logging
from importlib import metadata
from typing import Any

import click

from inbox.cli.params import TEXT
from inbox.domain.errors import InboxError, StoreUnavailable
from inbox.infra import config
from inbox.infra.config import Settings
from inbox.services import failures, runtime
from inbox.services.runtime import Runtime

EXAMPLE_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def settings() -> Settings:
    """The environment's settings; a missing DATABASE_URL is a one-line error with the fix."""
    try:
        found = config.settings()
    except ValueError as exc:  # a setting that does not parse, e.g. INBOX_DB_POOL_SIZE=ten
        raise Failed(f"a setting is invalid: {' '.join(str(exc).split())}") from None
    if not found.database_url:
        raise Failed(
            f"DATABASE_URL is not set: export it, for example export DATABASE_URL={EXAMPLE_URL}"
            "; beside a running make run, eval $(make -s env) in the checkout sets its exports"
        )
    return found


# Two connections: a command may read in one transaction while a service writes in another.
POOL_SIZE = 2
_RUNTIME = "inbox.runtime"


def current() -> Runtime:
    """This command's runtime (``inbox.services.runtime``): made when the command first
    needs the database, its engine closed when the command ends. No bells: a command that
    rings asks ``ringing()``."""
    root = click.get_current_context().find_root()
    found: Runtime | None = root.meta.get(_RUNTIME)
    if found is None:
        cfg = settings()
        found = Runtime(cfg, runtime.engine(cfg, POOL_SIZE))
        root.meta[_RUNTIME] = found
        root.call_on_close(found.engine.dispose)
    return found


def ringing() -> Runtime:
    """This command's runtime with the broker's bells (rung in line)."""
    rt = current()
    return dataclasses.replace(rt, bells=runtime.bells(rt.settings))


def _database() -> str:
    """DATABASE_URL without its password, to name in an error."""
    try:
        return runtime.database_label(config.settings().database_url)
    except ValueError:  # a setting that does not parse
        return "DATABASE_URL"


def _one_line(exc: click.ClickException) -> str:
    """A usage error's message with where to read more, instead of the usage block."""
    message = " ".join(exc.format_message().split())
    if isinstance(exc, click.UsageError) and exc.ctx is not None:
        return f"{message} (see '{exc.ctx.command_path} --help')"
    return message


class Failed(click.ClickException, InboxError):  # type: ignore[misc]  # both set message
    """What every failure becomes: ``Error: <one line>`` on stderr, exit status 1."""


class Misused(Failed):
    """A usage error as one line (no usage block), exit status 2 as click has it."""

    exit_code = 2


class _Command(click.Command):
    """A command whose string options and arguments are ``params.TEXT`` unless typed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _texts(self.params)


class _Group(click.Group):
    """Every command's failures meet here, and only here, and leave as one line.

    ``InboxError`` (the store's and the CLI's own: ``NotFound``, ``BadRequest`` ...),
    database errors, click's usage errors, and anything unexpected (a bug: one line that
    says so; ``inbox --traceback ...`` shows where).
    """

    command_class = _Command
    group_class = type  # subgroups are _Groups too

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _texts(self.params)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each command with its first sentence whole, wrapped (click cuts it with '...')."""
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, summary(cmd)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except Failed:
            raise
        except click.ClickException as exc:
            raise (Misused if exc.exit_code == 2 else Failed)(_one_line(exc)) from None
        except StoreUnavailable as exc:  # wrapped by a service: the database, in one line
            raise Failed(failures.explain(exc, _database())) from None
        except InboxError as exc:
            raise Failed(_with_fields(exc)) from None
        except (click.exceptions.Exit, click.Abort, KeyboardInterrupt, EOFError):
            raise
        except Exception as exc:
            if (own := failures.own(exc)) is not None:  # the database's, told in one line
                raise Failed(failures.explain(own, _database())) from None
            if ctx.find_root().params.get("traceback"):
                raise
            said = " ".join(str(exc).split())[:200]
            raise Failed(
                f"unexpected error ({type(exc).__name__}: {said}): this is a bug;"
                " inbox --traceback ... shows where"
            ) from None


def summary(cmd: click.Command) -> str:
    """A command's first sentence (its first paragraph when that has no full stop)."""
    if cmd.short_help:
        return cmd.short_help
    first = " ".join((cmd.help or "").strip().split("\n\n")[0].split())
    sentence, stop, _ = first.partition(". ")
    return sentence + "." if stop else first


def _texts(params: list[click.Parameter]) -> None:
    for param in params:
        if param.type is click.STRING:
            param.type = TEXT


def _with_fields(exc: InboxError) -> str:
    details = exc.extra.get("fields")
    if not isinstance(details, dict) or not details:
        return exc.message
    parts = [f"{name}: {v}" for name, v in sorted(details.items())]
    return f"{exc.message} ({'; '.join(parts)})"


@click.group(cls=_Group)
@click.version_option(metadata.version("webhook-inbox"), prog_name="inbox")
@click.option("--traceback", is_flag=True, help="On an unexpected error, show where (a bug).")
def main(traceback: bool) -> None:
    """Webhook Inbox: exactly-once decisions from at-least-once webhooks.

    Every command exits 0 when it did what it was asked, 1 with one line on stderr
    saying what is wrong (an unknown tenant, source, event or delivery, a value the
    database refuses, an unreachable database), and 2 for a usage error.
    """
    # A command reads its settings when it starts: a process runs one command, but a
    # caller that runs several in one process (click's CliRunner, with an environment
    # each) must not get the first one's. A setting that does not parse is said in one
    # line by the first part of the command that needs it (``settings``).
    try:
        config.reload()
    except ValueError:
        pass
    # The keyring logs why secrets are locked (for the long-running processes); here the
    # same sentence is the command's one error line: not twice.
    keyring_log = logging.getLogger("inbox.infra.keyring")
    if not any(isinstance(h, logging.NullHandler) for h in keyring_log.handlers):
        keyring_log.addHandler(logging.NullHandler())
    keyring_log.propagate = False
    # A bell that did not ring is said by the command itself (the sweep runs it later).
    bells_log = logging.getLogger("inbox.services.runtime")
    if not any(isinstance(h, logging.NullHandler) for h in bells_log.handlers):
        bells_log.addHandler(logging.NullHandler())
    bells_log.propagate = False


def split_ref(ref: str) -> tuple[str, str]:
    tenant, sep, name = ref.partition("/")
    if not sep or not tenant or not name:
        raise click.BadParameter(f"{ref!r}: expected TENANT/SOURCE", param_hint="TENANT/SOURCE")
    return tenant, name
