"""The operator's CLI, ``inbox``: one command group per module, all on ``base.main``."""

from __future__ import annotations

from inbox.cli import (  # noqa: F401  (they add their groups)
    audit,
    callbacks,
    endpoint_state,
    events,
    evidence,
    holds,
    lanes,
    ops,
    payloads,
    playbooks,
    secrets,
    sources,
    tokens,
)
from inbox.cli.base import main

__all__ = ["main"]
