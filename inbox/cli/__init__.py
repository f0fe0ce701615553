"""The operator's CLI, ``inbox``: one command group per module, all on ``base.main``.

The collector waits while the commands' modules load, then what they made is frozen
(``inbox.infra.gc_start``): a program that imports this package (the docs build, the
tests) gets the same, which only ever keeps what it made before for good.
"""

from __future__ import annotations

from inbox.infra import gc_start

with gc_start.starting():
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
