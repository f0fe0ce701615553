"""Ordered lanes across real worker processes, counted from the effects (the ``lane``
playbook writes a sink row as its step starts and one as it ends or fails): no two events
of a lane overlap and none starts before an earlier one, with no sweep in the lane's path,
across a worker killed with SIGKILL mid-step (its lease expires), retries, a poison event
that holds only its lane, its replay (it runs first, then the rest) and a skip."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from inbox.cli import main
from tests import helpers
from tests.helpers import body_of, hmac_headers, sink_rows
from tests.lane_effects import judge
from tests.procs import CeleryProc, Web
from tests.sink_playbooks import CRASH_DIR

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("sink_table")]


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    helpers.wait_for(cond, timeout, what, interval=0.1)


@pytest.fixture
def env(database_url: str, redis_url: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "BROKER_URL": redis_url,
        "INBOX_PLAYBOOKS": "tests.sink_playbooks",
        "INBOX_LEASE_SECONDS": "3",
        "INBOX_RETRY_BASE_SECONDS": "0.05",
        "INBOX_BATCH_SIZE": "4",
    }


def send_lanes(web: Web, src, plan: dict[str, list[dict]]) -> dict[str, tuple[str, int]]:
    """Each lane's events sent in order, every lane from a thread of its own, released
    together; public id -> (lane, position)."""
    position: dict[str, tuple[str, int]] = {}
    barrier = threading.Barrier(len(plan))
    lock = threading.Lock()

    def lane(name: str, events: list[dict]) -> None:
        barrier.wait()
        for n, extra in enumerate(events):
            body = body_of({"type": "lane", "account": name, "n": n, **extra})
            status, _, answer = web.request(
                "POST", src.path, body, hmac_headers("s3cret", body, f"{name}-{n}")
            )
            assert status == 202, answer
            public_id = answer.decode().split('"id":"')[1].split('"')[0]
            with lock:
                position[public_id] = (name, n)

    threads = [threading.Thread(target=lane, args=item) for item in plan.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(position) == sum(len(v) for v in plan.values())
    return position


def states(engine) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(conn.execute(text("SELECT public_id, state FROM events")).all())


def test_lanes_advance_on_their_predecessors_commit_with_no_sweep(env, procs, make_source, engine):
    # No beat and an hour between sweeps: only a predecessor's commit can wake a lane's
    # next event. Each lane's first step takes 1.5 s and the rest of the lane arrives
    # meanwhile: their doorbells find nothing due, and nothing else is sent afterwards.
    env = {**env, "INBOX_SWEEP_SECONDS": "3600"}
    src = make_source(
        playbook="lane", business_key_paths=["account"], serialize_by_business_key=True
    )
    web = Web(env)
    procs.append(web)
    for _ in range(2):
        procs.append(CeleryProc(env))
    plan = {
        f"acct-{i}": [{"ms": 1500}] + [{"ms": 20 + 10 * (n % 4)} for n in range(5)]
        for i in range(3)  # fewer lanes than a batch: a claim of their heads is never full
    }
    position = send_lanes(web, src, plan)
    assert "completed" not in states(engine).values()  # all sent while the first ones ran
    wait_for(lambda: list(states(engine).values()).count("completed") == 18, 60, "every event")
    rows = sink_rows(engine)
    v = judge(rows, position)
    assert (v.overlaps, v.out_of_order) == (0, 0)
    assert all(v.ends[lane] == list(range(6)) for lane in plan)


def _worker_of(pid: int, workers: list[CeleryProc]) -> CeleryProc:
    """The worker whose pool process ``pid`` is (its parent is the worker's main process)."""
    with open(f"/proc/{pid}/stat") as f:
        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
    [worker] = [w for w in workers if w.popen.pid in (pid, ppid)]
    return worker


def test_kill_lease_expiry_retries_poison_replay_and_skip_keep_each_lane_in_order(
    env, procs, make_source, engine
):
    env = {**env, "INBOX_SWEEP_SECONDS": "1"}
    src = make_source(
        playbook="lane",
        business_key_paths=["account"],
        serialize_by_business_key=True,
        max_attempts=5,
    )
    CRASH_DIR.mkdir(parents=True, exist_ok=True)
    (CRASH_DIR / "lane-crash").touch()
    web = Web(env)
    procs.append(web)
    workers = [CeleryProc(env), CeleryProc(env)]
    procs.extend(workers)
    procs.append(CeleryProc(env, kind="beat"))
    step = {"ms": 15}
    plan = {
        "killed": [step, {**step, "crash": "lane-crash"}, step, step, step],
        "poison": [step, step, {**step, "poison": True}, step, step],
        "retried": [step, {**step, "fail_times": 2}, step, step],
        "skipped": [step, {**step, "poison": True}, step, step],
        "plain": [step] * 5,
    }
    position = send_lanes(web, src, plan)
    by = {(lane, n): p for p, (lane, n) in position.items()}

    # The worker that took the crashing event hangs mid-step: kill it, as a host dies.
    def started(event: str) -> list:
        return [r for r in sink_rows(engine) if r.event == event and r.step == "start"]

    wait_for(lambda: bool(started(by["killed", 1])), 60, "the crashing step to start")
    victim = _worker_of(started(by["killed", 1])[0].pid, workers)
    victim.stop(signal.SIGKILL)
    survivor = CeleryProc(env)
    procs.append(survivor)  # its lease expires; the sweeper puts it back; another runs it

    def settled() -> bool:
        s = states(engine)
        done = [p for p, (lane, _) in position.items() if lane in ("killed", "retried", "plain")]
        return all(s[p] == "completed" for p in done) and all(
            s[by[lane, 0]] == "completed" and s[by[lane, k]] == "quarantined"
            for lane, k in (("poison", 2), ("skipped", 1))
        )

    wait_for(settled, 120, "every lane to finish or block")
    s = states(engine)
    held = [by["poison", 3], by["poison", 4], by["skipped", 2], by["skipped", 3]]
    assert all(s[p] == "received" for p in held)
    v = judge(sink_rows(engine), position)
    assert (v.overlaps, v.out_of_order) == (0, 0)
    assert v.starts["poison"] == [0, 1, 2] and v.starts["skipped"] == [0, 1]  # held: not run
    assert v.ends["killed"] == [0, 1, 2, 3, 4] and v.ends["retried"] == [0, 1, 2, 3]
    kill_rows = [r for r in sink_rows(engine) if r.event == by["killed", 1] and r.step == "start"]
    assert len(kill_rows) == 2 and kill_rows[0].pid != kill_rows[1].pid

    # The operator's two ways out, through the CLI (its doorbell rings the workers).
    cli = CliRunner()
    out = cli.invoke(main, ["lanes", "blocked", "--json"], env=env, catch_exceptions=False)
    blocked = {b["event"]: b["held"] for b in json.loads(out.output)}
    assert blocked == {by["poison", 2]: 2, by["skipped", 1]: 2}
    replay = cli.invoke(main, ["replay", by["poison", 2]], env=env)
    assert replay.exit_code == 0, replay.output
    skip = cli.invoke(
        main,
        ["lanes", "skip", by["skipped", 1], "--reason", "done by hand", "--actor", "ops"],
        env=env,
    )
    assert skip.exit_code == 0, skip.output
    wait_for(lambda: all(states(engine)[p] == "completed" for p in held), 60, "the held events")
    s = states(engine)
    assert s[by["poison", 2]] == "completed" and s[by["skipped", 1]] == "quarantined"
    v = judge(sink_rows(engine), position)
    assert (v.overlaps, v.out_of_order) == (0, 0)
    assert v.ends["poison"] == [0, 1, 2, 3, 4]  # the replayed blocker first, then the rest
    assert v.ends["skipped"] == [0, 2, 3]


def test_events_out_of_time_order_run_by_the_providers_time_across_workers(
    env, procs, make_source, engine
):
    """A source ordered by the provider's time (``occurred_at_path``): while the lane's
    first event runs (1.5 s), events with later times arrive out of order; they run in
    time order. One arriving after a later one ran goes to the stale guard (``stale``)."""
    env = {**env, "INBOX_SWEEP_SECONDS": "3600"}
    src = make_source(
        playbook="lane",
        business_key_paths=["account"],
        serialize_by_business_key=True,
        occurred_at_path="at",
    )
    web = Web(env)
    procs.append(web)
    for _ in range(2):
        procs.append(CeleryProc(env))

    def post(at: int, ms: int) -> str:
        body = body_of({"type": "lane", "account": "a", "n": at, "at": at, "ms": ms})
        status, _, answer = web.request("POST", src.path, body, hmac_headers("s3cret", body))
        assert status == 202, answer
        return str(json.loads(answer)["id"])

    position = {post(10, 1500): ("a", 10)}
    wait_for(lambda: any(r.step == "start" for r in sink_rows(engine)), 30, "the first start")
    for at in (40, 20, 30):  # all while the first runs, none started
        position[post(at, 20)] = ("a", at)
    wait_for(lambda: list(states(engine).values()).count("completed") == 4, 60, "four events")
    late = post(25, 20)  # after 30 and 40 ran
    position[late] = ("a", 25)
    wait_for(lambda: states(engine)[late] == "completed", 60, "the late event")
    v = judge(sink_rows(engine), position)
    assert v.overlaps == 0
    assert v.starts["a"] == [10, 20, 30, 40, 25]
    with engine.connect() as conn:
        outcome = conn.execute(
            text("SELECT outcome FROM events WHERE public_id = :p"), {"p": late}
        ).scalar_one()
    assert outcome == "stale"
