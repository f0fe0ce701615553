"""Playbooks for tests. Their outside system is a sink table written on its own connection.

Loaded by workers through ``INBOX_PLAYBOOKS=tests.sink_playbooks``.
"""

from __future__ import annotations

import gc
import os
import time
from pathlib import Path
from typing import Any

import psycopg

from inbox import PermanentError, Playbook, StepContext, register

SINK_DDL = """
CREATE TABLE IF NOT EXISTS test_sink (
    id bigserial PRIMARY KEY, step_key text NOT NULL, step text NOT NULL,
    event text NOT NULL, pid int NOT NULL, at timestamptz NOT NULL DEFAULT now())
"""
# One directory per test process (xdist worker), inherited by the workers it starts.
CRASH_DIR = (
    Path(__file__).resolve().parent.parent
    / ".data"
    / f"crash-markers-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
)


def sink(ctx: StepContext) -> None:
    """The outside effect: one row per call, keyed by the step's idempotency key.

    The table is in DATABASE_URL's database, or in INBOX_TEST_SINK_URL's when a test keeps
    its outside system apart from the inbox's (the failover test: an effect made there
    survives whatever happens to the inbox's database)."""
    url = os.environ.get("INBOX_TEST_SINK_URL") or os.environ["DATABASE_URL"]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO test_sink (step_key, step, event, pid) VALUES (%s, %s, %s, %s)",
            (ctx.step_key, ctx.step, ctx.event.public_id, os.getpid()),
        )


two_step = register(Playbook("two-step"), event_type="two.step")


@two_step.step("charge")
def charge(ctx: StepContext) -> dict[str, Any]:
    marker = CRASH_DIR / str(ctx.payload.get("crash", ""))
    crash = bool(ctx.payload.get("crash")) and marker.exists()
    if crash:
        marker.unlink()  # before the effect: a worker killed right after it must not crash again
    sink(ctx)
    if crash:
        time.sleep(3600)  # the test SIGKILLs this worker here: effect done, not committed
    return {"charged": True}


@two_step.step("notify")
def notify(ctx: StepContext) -> dict[str, Any]:
    sink(ctx)
    if ctx.payload.get("fail_notify_times", 0) >= ctx.event.attempt:
        raise RuntimeError("notify failed")
    if ctx.payload.get("fail_marker") and (CRASH_DIR / ctx.payload["fail_marker"]).exists():
        raise RuntimeError("notify is down")
    return {"notified": ctx.results["charge"]["charged"]}


flaky = register(Playbook("flaky", permanent=(KeyError,)), event_type="flaky")


@flaky.step("work")
def work(ctx: StepContext) -> dict[str, Any]:
    sink(ctx)
    p = ctx.payload
    if p.get("sleep"):
        time.sleep(p["sleep"])
    if p.get("poison"):
        raise RuntimeError("poison event")
    if p.get("permanent"):
        raise PermanentError("no retry can fix this")
    if p.get("keyerror"):
        raise KeyError("listed as permanent by the playbook")
    return {"ok": True}


deny = register(Playbook("deny"), event_type="sim.swap")


@deny.step("deny", once_per_business_key=True)
def deny_account(ctx: StepContext) -> dict[str, Any]:
    sink(ctx)
    return {"denied": ctx.payload["account"]}


noop = register(Playbook("noop"), event_type="noop")


@noop.step("noop", effect=False)
def nothing(ctx: StepContext) -> dict[str, Any]:
    return {}


# Stale events: closing a manual-review task must not overwrite a later decision.
review = register(Playbook("review"), event_type="review")


@review.step("close_task", skip_if_stale=True)
def close_task(ctx: StepContext) -> dict[str, Any]:
    time.sleep(float(ctx.payload.get("sleep", 0)))  # widens the window for a race
    if ctx.payload.get("down_until_replay") and ctx.replay == 0:
        raise PermanentError("the case system is down")
    sink(ctx)
    return {"case": ctx.payload["case"], "decision": ctx.payload["decision"]}


@review.step("note", effect=False)
def note_newer(ctx: StepContext) -> dict[str, Any]:
    newer = ctx.newer
    if newer is None:
        return {"newer": None}
    at = newer.occurred_at.isoformat() if newer.occurred_at is not None else None
    version = str(newer.version) if newer.version is not None else None
    return {"newer": newer.public_id, "newer_at": at, "newer_version": version}


later = register(Playbook("later"), event_type="retry.later")


@later.step("attempt")
def attempt(ctx: StepContext) -> dict[str, Any]:
    """Fails its first ``fail_times`` attempts (a retryable error: the backoff applies)."""
    if ctx.event.attempt <= ctx.payload.get("fail_times", 0):
        raise RuntimeError(f"attempt {ctx.event.attempt} fails")
    return {"attempts": ctx.event.attempt}


# One event, two outside effects: a charge at the sink table and a callback to the tenant's
# endpoints (its webhook-id stable across retries). tests/e2e/test_two_of_every_process.py
charge_tell = register(Playbook("charge-and-tell"), event_type="charge.tell")


@charge_tell.step("charge")
def charge_once(ctx: StepContext) -> dict[str, Any]:
    sink(ctx)
    return {"charged": ctx.payload["id"]}


@charge_tell.step("tell")
def tell(ctx: StepContext) -> dict[str, Any]:
    sink(ctx)
    ctx.send("charge.told", {"id": ctx.payload["id"], "charged": ctx.results["charge"]["charged"]})
    return {"told": True}


# A replay's preview (tests/integration/test_replay_preview.py): a step with a recovery
# point, a once-per-business-key step, a stale-guarded step, and declared callbacks. The
# payload's fail_open / fail_close break a step in the original processing only.
preview_case = register(Playbook("preview-case"), event_type="preview.case")


@preview_case.step("open", sends=("case.opened",))
def open_case(ctx: StepContext) -> dict[str, Any]:
    if ctx.payload.get("fail_open") and ctx.replay == 0:
        raise PermanentError("the case system refused to open")
    sink(ctx)
    ctx.send("case.opened", {"case": ctx.payload["case"]})
    return {"opened": True}


@preview_case.step("lock", once_per_business_key=True, sends=())
def lock_case(ctx: StepContext) -> dict[str, Any]:
    sink(ctx)
    return {"locked": True}


@preview_case.step("close", skip_if_stale=True, sends=("case.closed",))
def close_case(ctx: StepContext) -> dict[str, Any]:
    if ctx.payload.get("fail_close") and ctx.replay == 0:
        raise PermanentError("the case system refused to close")
    sink(ctx)
    ctx.send("case.closed", {"case": ctx.payload["case"]})
    return {"closed": True}


# Ordered lanes (tests/integration/test_lanes.py, tests/e2e/test_lane_processes.py): one
# step whose start and end (or failure) are sink rows, so overlap and order are counted from
# the effects. The payload: ``ms`` (the step's time), ``poison`` (fails permanently until
# replayed), ``crash`` (a marker file: the worker sleeps after the start row, to be killed),
# ``fail_times`` (retryable failures first).
lane = register(Playbook("lane"), event_type="lane")


def _lane_row(ctx: StepContext, what: str) -> None:
    url = os.environ.get("INBOX_TEST_SINK_URL") or os.environ["DATABASE_URL"]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO test_sink (step_key, step, event, pid) VALUES (%s, %s, %s, %s)",
            (
                f"{ctx.step_key}:{ctx.event.attempt}:{ctx.replay}",
                what,
                ctx.event.public_id,
                os.getpid(),
            ),
        )


@lane.step("work")
def lane_work(ctx: StepContext) -> dict[str, Any]:
    _lane_row(ctx, "start")
    p = ctx.payload
    marker = CRASH_DIR / str(p.get("crash", ""))
    if p.get("crash") and marker.exists():
        marker.unlink()
        time.sleep(3600)  # the test SIGKILLs this worker here, mid-step
    time.sleep(float(p.get("ms", 0)) / 1000)
    if (p.get("poison") and ctx.replay == 0) or ctx.event.attempt <= p.get("fail_times", 0):
        _lane_row(ctx, "fail")
        if p.get("poison"):
            raise PermanentError("poison event")
        raise RuntimeError("not yet")
    _lane_row(ctx, "end")
    return {"n": p.get("n")}


collector = register(Playbook("gc-state"), event_type="gc.state")


@collector.step("report")
def report(ctx: StepContext) -> None:
    """The collector as the process a step runs in has it (test_collector_processes.py)."""
    on = "on" if gc.isenabled() else "off"
    frozen = "start frozen" if gc.get_freeze_count() > 0 else "nothing frozen"
    url = os.environ["DATABASE_URL"]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO test_sink (step_key, step, event, pid) VALUES (%s, %s, %s, %s)",
            (ctx.step_key, f"collector {on}, {frozen}", ctx.event.public_id, os.getpid()),
        )
