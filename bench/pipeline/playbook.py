"""The pipeline's playbook, loaded by every process of the run (``INBOX_PLAYBOOKS``)."""

from __future__ import annotations

import os
import threading
from typing import Any

import psycopg

from inbox import Playbook, StepContext, register

TENANT, SOURCE, SECRET = "pipeline", "pipeline", "pipeline-bench-secret"
EVENT_TYPE = "pipeline.event"
COPY_EVERY = 10  # one request in ten repeats an earlier key
BARS = {"completed_p99_ms": 1000.0, "callback_p99_ms": 2000.0}

# -- the playbook, loaded by every process of the run ------------------------------------

pipeline = register(Playbook("pipeline"), event_type=EVENT_TYPE)
_effects = threading.local()


@pipeline.step("check", effect=False)
def check(ctx: StepContext) -> dict[str, Any]:
    return {"checked": True}


@pipeline.step("apply")
def apply(ctx: StepContext) -> dict[str, Any]:
    """The outside effect, a row keyed by the step key, and one callback."""
    conn = getattr(_effects, "conn", None)
    if conn is None or conn.closed:
        conn = _effects.conn = psycopg.connect(os.environ["BENCH_EFFECTS_URL"], autocommit=True)
    try:
        conn.execute(
            "INSERT INTO pipeline_effects (step_key) VALUES (%s) ON CONFLICT DO NOTHING",
            (ctx.step_key,),
        )
    except psycopg.OperationalError:
        conn.close()  # a restarted server: the next attempt connects again
        raise
    ctx.send("pipeline.done", {"event": ctx.event.public_id})
    return {"applied": True}
