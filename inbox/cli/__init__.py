"""The operator's CLI, ``inbox``: one command group per module, all on ``base.main``."""

from __future__ import annotations

from inbox.cli import callbacks, events, ops, sources, tokens  # noqa: F401  (they add their groups)
from inbox.cli.base import main

__all__ = ["main"]
