"""Operators: the CLI, event views, and replays that resume rather than redo."""

from __future__ import annotations

import json
import threading

import pytest
from click.testing import CliRunner
from sqlalchemy import text

import tests.sink_playbooks  # noqa: F401
from inbox.cli import main
from inbox.infra.config import Settings
from inbox.services.drain import drain_once
from inbox.services.runtime import Runtime
from inbox.store.write import operator
from tests.helpers import body_of, hmac_headers, sink_rows
from tests.sink_playbooks import CRASH_DIR

_URL = "http://127.0.0.1:8000"


@pytest.fixture
def cli(database_url):
    runner = CliRunner()

    def run(*args: str) -> str:
        result = runner.invoke(main, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    return run


@pytest.fixture
def wsettings(settings):
    return Settings(database_url=settings.database_url, retry_base_seconds=0.01)


def test_tenant_and_source_commands(cli, engine):
    assert "tenant acme created" in cli("tenants", "create", "acme")
    out = cli(
        "sources",
        "create",
        "--tenant",
        "acme",
        "--name",
        "stripe",
        "--scheme",
        "stripe",
        "--secret",
        "whsec_a",
        "--option",
        "tolerance=600",
    )
    assert "/hooks/acme/stripe" in out and '"tolerance": 600' in out
    listed = cli("sources", "list").splitlines()
    assert listed[0].split() == ["SOURCE", "SCHEME", "ENABLED", "SECRETS", "URL"]
    assert listed[1].split() == ["acme/stripe", "stripe", "yes", "1", _URL + "/hooks/acme/stripe"]
    out = cli("sources", "create", "--tenant", "acme", "--name", "open", "--scheme", "none")
    assert "WARNING" in out and "anyone" in out
    assert "added secret" in cli("sources", "rotate", "acme/stripe", "--secret", "whsec_b")
    assert "2 active" in cli("sources", "show", "acme/stripe")
    assert "revoked 1" in cli("sources", "rotate", "acme/stripe", "--secret", "whsec_b", "--finish")
    assert "1 active" in cli("sources", "show", "acme/stripe")
    cli("sources", "disable", "acme/stripe")
    rows = [r.split() for r in cli("sources", "list", "--tenant", "acme").splitlines()[1:]]
    assert [r[:3] for r in rows] == [["acme/open", "none", "yes"], ["acme/stripe", "stripe", "no"]]


def test_replay_resumes_at_the_failed_step_and_runs_it_once(
    client, make_source, engine, wsettings, cli, sink_table
):
    src = make_source(event_type_path="type", max_attempts=1)
    CRASH_DIR.mkdir(parents=True, exist_ok=True)
    (CRASH_DIR / "notify-down").touch()
    body = body_of({"type": "two.step", "fail_marker": "notify-down"})
    public_id = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, "r")).json[
        "id"
    ]
    drain_once(Runtime(wsettings, engine))
    assert "quarantined" in cli("events", "list", "--state", "quarantined")
    assert [r.step for r in sink_rows(engine)] == ["charge", "notify"]
    (CRASH_DIR / "notify-down").unlink()
    assert "would replay 1" in cli("replay", "--quarantined", "--tenant", src.tenant, "--dry-run")
    out = cli("replay", public_id, "--actor", "alice")
    assert "replayed 1 of 1" in out
    drain_once(Runtime(wsettings, engine))
    assert [r.step for r in sink_rows(engine)] == ["charge", "notify", "notify"]  # no 2nd charge
    shown = json.loads(cli("events", "show", public_id, "--json"))
    assert shown["state"] == "completed"
    assert [(a["actor"], a["action"]) for a in shown["audit"]] == [("alice", "replay")]
    assert {s["name"] for s in shown["steps"]} >= {"charge"}
    assert "s3cret" not in json.dumps(shown) and "s3cret" not in cli("events", "show", public_id)


def test_two_operators_replaying_at_once_run_it_once(
    client, make_source, engine, wsettings, sink_table
):
    src = make_source(event_type_path="type", max_attempts=1)
    body = body_of({"type": "flaky", "poison": True})
    public_id = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, "p")).json[
        "id"
    ]
    drain_once(Runtime(wsettings, engine))
    barrier = threading.Barrier(2)
    moved: list[list[str]] = []

    def operate(name: str) -> None:
        with engine.connect() as conn:
            barrier.wait()
            with conn.begin():
                moved.append(operator.replay(conn, [public_id], name))

    threads = [threading.Thread(target=operate, args=(n,)) for n in ("ann", "bob")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(len(m) for m in moved) == [0, 1]
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM audit_log")).scalar_one() == 1
        assert conn.execute(text("SELECT state FROM events")).scalar_one() == "received"
    drain_once(Runtime(wsettings, engine))
    assert len(sink_rows(engine)) == 2  # the first attempt and one replay
