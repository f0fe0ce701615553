"""One implementation per operator use case: the admin API, the console and the CLI call
the same function of ``inbox.services.operations`` / ``replays`` and leave the same rows."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from inbox.cli import main
from inbox.domain import callbacks
from inbox.domain.errors import NotFound
from inbox.services import operations, replays
from inbox.services.bulk import NotReplayable
from inbox.services.operations import Actor
from inbox.services.runtime import Bells, Runtime
from inbox.store.reads import endpoints as ereads
from inbox.store.write import endpoints as estore
from tests.helpers import wait_for
from tests.integration.test_api import make_token, quarantine


@pytest.fixture
def runner(database_url: str) -> CliRunner:
    return CliRunner()


def cli(runner: CliRunner, *args: str) -> str:
    result = runner.invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def spy(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[tuple[Any, ...]]:
    """Record every call of ``module.name`` (still calling it)."""
    calls: list[tuple[Any, ...]] = []
    real = getattr(module, name)

    def recorded(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, recorded)
    return calls


def replayed_row(engine: Any, public_id: str) -> dict[str, Any]:
    """The event and its audit row as a replay leaves them (the actor aside)."""
    with engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT e.state, e.attempts, e.replay, e.finished_at IS NULL AS open,"
                " e.last_error_class, a.action, a.detail - 'public_id' AS detail"
                " FROM events e JOIN audit_log a ON a.subject_kind = 'event'"
                " AND a.subject_id = e.id WHERE e.public_id = :p"
            ),
            {"p": public_id},
        ).one()
    return dict(row._mapping)


def test_the_api_and_the_cli_replay_an_event_through_one_function(
    client, engine, make_source, monkeypatch
):
    src = make_source(tenant="ops", name="billing")
    by_api, by_cli = quarantine(engine, src, 2, "evt_same")
    headers = make_token(engine, "alice", "operator")
    calls = spy(monkeypatch, operations, "replay_events")
    runner = CliRunner()

    assert client.post(f"/api/v1/events/{by_api}/replay", headers=headers).status_code == 200
    cli(runner, "replay", by_cli, "--actor", "bob")

    assert [(c[1], list(c[2])) for c in calls] == [
        (Actor("alice", None), [by_api]),
        (Actor("bob", None), [by_cli]),
    ]
    api_row, cli_row = replayed_row(engine, by_api), replayed_row(engine, by_cli)
    assert api_row == cli_row
    assert api_row["state"] == "received" and api_row["action"] == "replay"
    assert api_row["detail"]["attempts_before"] == 0 and api_row["detail"]["replay"] == 1


def test_a_replay_checks_every_id_before_anything_moves(engine, make_source, settings):
    src = make_source(tenant="ops", name="billing")
    (known,) = quarantine(engine, src, 1, "evt_known")
    rt = Runtime(settings, engine)
    with pytest.raises(NotFound, match="No event evt_nosuch"):
        operations.replay_events(rt, Actor("alice"), [known, "evt_nosuch"])
    with engine.connect() as conn:
        state = conn.execute(
            text("SELECT state FROM events WHERE public_id = :p"), {"p": known}
        ).scalar_one()
    assert state == "quarantined"


def test_a_scoped_actor_does_not_see_another_tenants_event(engine, make_source, settings):
    mine, theirs = make_source(tenant="ta", name="b"), make_source(tenant="tb", name="b")
    quarantine(engine, mine, 1, "evt_mine")
    (other,) = quarantine(engine, theirs, 1, "evt_theirs")
    rt = Runtime(settings, engine)
    with pytest.raises(NotFound):
        operations.replay_event(rt, Actor("alice", mine.tenant_id), other)


def test_a_replay_rings_the_doorbell_once_and_only_when_something_moved(
    engine, make_source, settings
):
    src = make_source(tenant="ops", name="billing")
    ids = quarantine(engine, src, 3, "evt_ring")
    rung: list[int] = []
    rt = Runtime(settings, engine, Bells(doorbell=lambda: rung.append(1)))
    done = operations.replay_events(rt, Actor("alice"), ids)
    assert sorted(done.moved) == sorted(ids) and done.rung == "rung" and rung == [1]
    with pytest.raises(NotReplayable):  # received now: nothing moves, nothing rings
        operations.replay_event(rt, Actor("alice"), ids[0])
    assert rung == [1]


def test_a_bell_that_fails_is_said_never_raised(caplog):
    def down() -> None:
        raise ConnectionError("broker down")

    assert Bells(doorbell=down).ring("doorbell") == "failed"
    assert Bells().ring("ring_couriers", {1}) == "no bell"
    assert "doorbell failed: ConnectionError" in caplog.text


def test_the_cli_and_the_api_review_a_bulk_replay_through_one_function(
    client, engine, make_source, monkeypatch, settings
):
    src = make_source(tenant="ops", name="billing")
    quarantine(engine, src, 4, "evt_bulk")
    monkeypatch.setenv("INBOX_BULK_APPROVAL_MIN", "2")
    rt = Runtime(dataclasses.replace(settings, bulk_approval_min=2), engine)
    first, _ = replays.start(rt, Actor("carol"), _request("ops"))
    assert first.status == "awaiting_approval"
    calls = spy(monkeypatch, replays, "review")
    headers = make_token(engine, "alice", "operator")
    answer = client.post(f"/api/v1/replays/{first.public_id}/reject", headers=headers)
    assert answer.status_code == 200 and answer.json["status"] == "rejected"
    second, _ = replays.start(rt, Actor("carol"), _request("ops"))
    out = cli(CliRunner(), "replay", "--approve", second.public_id, "--actor", "bob")
    assert "queued by bob; requested by carol" in out and "completed: replayed 4" in out
    assert [(c[1], c[2]) for c in calls] == [
        (Actor("alice"), first.public_id),
        (Actor("bob"), second.public_id),
    ]


def _request(tenant: str) -> Any:
    from inbox.services import bulk

    return bulk.parse_request({"kind": "events", "filter": {"tenant": tenant}, "rate": 1000})


def test_endpoint_changes_from_the_cli_are_audited_as_from_the_api(engine, make_source, runner):
    make_source(tenant="ops", name="billing")
    with engine.begin() as conn:
        ep = estore.create_endpoint(conn, "ops", "https://x.example/h", callbacks.new_secret())
    cli(runner, "endpoints", "disable", ep.public_id, "--actor", "bob")
    with engine.connect() as conn:
        reason = ereads.get_endpoint(conn, ep.public_id).disabled_reason
    assert reason == "disabled by bob"
    cli(runner, "endpoints", "enable", ep.public_id, "--actor", "bob")
    with engine.connect() as conn:
        audited = conn.execute(
            text("SELECT actor, action FROM audit_log WHERE subject_kind = 'endpoint' ORDER BY id")
        ).all()
    assert [tuple(r) for r in audited] == [("bob", "disable"), ("bob", "enable")]


def test_a_cli_command_closes_its_engine_when_it_ends(engine, runner):
    """One runtime per command (inbox.cli.base.current): its connections end with it,
    whether the command succeeded or failed."""

    def others() -> int:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname ="
                        " current_database() AND pid <> pg_backend_pid()"
                    )
                ).scalar_one()
            )

    before = others()
    for _ in range(5):
        assert runner.invoke(main, ["tenants", "list"]).exit_code == 0
        assert runner.invoke(main, ["events", "list", "--tenant", "nosuch"]).exit_code == 1
    # A connection left pooled by a command stays open for good; one of another test
    # ending in this database (a process it started, still stopping) goes in a moment.
    wait_for(lambda: others() <= before, 30)
