"""The drain benchmark's playbook: one step with no outside effect that does nothing.

Workers load it through ``INBOX_PLAYBOOKS=bench._drain_playbooks`` (cwd and PYTHONPATH at
the repository root); the in-process profiler imports it as ``_drain_playbooks``.
"""

from __future__ import annotations

from typing import Any

from inbox.domain.playbooks import Playbook, StepContext, register

NAME = "bench-noop"

noop = Playbook(NAME)


@noop.step("noop", effect=False)
def nothing(ctx: StepContext) -> dict[str, Any]:
    return {}


register(noop, event_type="bench.noop")
