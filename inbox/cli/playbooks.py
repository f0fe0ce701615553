"""``inbox playbooks``: what INBOX_PLAYBOOKS loads, and from where."""

from __future__ import annotations

import click

from inbox.cli.base import main
from inbox.cli.output import emit_json, json_option, table
from inbox.infra import config
from inbox.services import playbooks as loader


def load() -> tuple[str, ...]:
    """Import the modules of INBOX_PLAYBOOKS; one line and a non-zero exit if one fails."""
    modules = config.settings().playbook_modules
    try:
        loader.load(modules)
    except loader.CannotLoad as exc:
        raise click.ClickException(str(exc)) from None
    return modules


def check(name: str | None) -> None:
    """A source's playbook must be registered by INBOX_PLAYBOOKS (or be built in)."""
    if name is not None:
        loader.check_name(name, load())


@main.group()
def playbooks() -> None:
    """The playbooks this environment's INBOX_PLAYBOOKS registers, with the built-in ones."""


@playbooks.command("list")
@json_option
def playbooks_list(as_json: bool) -> None:
    """Every registered playbook: its name, steps, and the module and file it came from."""
    modules = load()
    found = loader.listing()
    if as_json:
        emit_json(
            {
                "modules": list(modules),
                "playbooks": [
                    {"name": p.name, "module": p.module, "file": p.file, "steps": list(p.steps)}
                    for p in found
                ],
            }
        )
        return
    if not modules:
        click.echo(f"{loader.SETTING} is not set: only the built-in playbooks are registered")
    table(
        ["playbook", "steps", "module", "file"],
        [(p.name, ", ".join(p.steps), p.module, p.file) for p in found],
    )
