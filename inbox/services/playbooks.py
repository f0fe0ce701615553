"""The playbook modules of ``INBOX_PLAYBOOKS``: loaded once per process, listed, checked.

A module that does not import stops the process at start with one line naming the
module and the setting (``CannotLoad``), instead of a traceback at every restart. Each
playbook remembers the module that registered it, for ``inbox playbooks list``; a
source's playbook name is checked against the registry when it is set (``check_name``).
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass

from inbox.domain.errors import BadRequest, InboxError
from inbox.domain.playbooks import Registry, registry

SETTING = "INBOX_PLAYBOOKS"
BUILT_IN = "inbox.domain.playbooks"


class CannotLoad(InboxError):
    """A module named in INBOX_PLAYBOOKS does not import; the message is one line."""


@dataclass(frozen=True)
class Loaded:
    name: str
    module: str
    file: str
    steps: tuple[str, ...]


def load(modules: tuple[str, ...], reg: Registry = registry) -> None:
    """Import each module (they register their playbooks); remember who registered what.

    As ``celery -A`` and ``python -m`` do, the working directory is on the import path, so
    every process (the CLI's console script too) finds a module kept next to the Procfile.
    """
    if modules and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    for module in modules:
        before = dict(reg.by_name)
        try:
            importlib.import_module(module)
        except Exception as exc:  # any failure of a user's module, said in one line
            first = " ".join(str(exc).split()) or type(exc).__name__
            raise CannotLoad(
                f"{SETTING}: module {module!r} does not import ({type(exc).__name__}: {first});"
                f" fix the module or its name, or remove it from {SETTING}"
            ) from None
        for name, pb in reg.by_name.items():
            if before.get(name) is not pb:
                reg.origins[name] = module


def listing(reg: Registry = registry) -> list[Loaded]:
    """Every registered playbook with the module and file it came from, by name."""
    out = []
    for name, pb in sorted(reg.by_name.items()):
        # The module that registered it when this process imported it; else (imported
        # before, e.g. by another module) the module of its first step.
        module = reg.origins.get(name) or (pb.steps[0].fn.__module__ if pb.steps else BUILT_IN)
        file = getattr(sys.modules.get(module), "__file__", None) or "-"
        out.append(Loaded(name, module, file, tuple(s.name for s in pb.steps)))
    return out


def check_name(name: object, modules: tuple[str, ...], reg: Registry = registry) -> None:
    """A source's ``playbook`` must name a registered playbook: a clear 400 otherwise."""
    if name is None or name in reg.by_name:
        return
    known = ", ".join(sorted(reg.by_name))
    if not modules:
        raise BadRequest(
            f"no playbook named {name!r}: {SETTING} is not set, so only the built-in"
            f" playbooks are registered ({known}); set {SETTING} to the module that"
            f" registers {name!r}"
        )
    raise BadRequest(
        f"no playbook named {name!r} is registered by {SETTING} ({', '.join(modules)});"
        f" registered: {known}"
    )
