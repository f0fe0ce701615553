"""CEL filters against the real database, a real drain and a real HTTP sink.

A source's filter: an event it is not true for is stored as ``filtered`` with the reason,
answered with the scheme's 2xx, never run (no step, no callback reaches the sink), and an
operator's replay runs it. An invalid expression is refused by the CLI with the parser's
message on one line. An endpoint's filter keeps callbacks from being written for it.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from prometheus_client import REGISTRY
from sqlalchemy import text

from inbox.cli import main
from inbox.domain import callbacks
from inbox.infra.config import Settings
from inbox.services.courier import deliver_once
from inbox.services.drain import drain_once
from inbox.services.runtime import Runtime
from inbox.store.write import endpoints as estore
from inbox.store.write import operator
from tests.helpers import body_of, hmac_headers, wait_for
from tests.integration.ui_support import new_token, post, sign_in
from tests.sink import Sink

BIG = "body.amount > 100"


@pytest.fixture
def wsettings(settings: Settings) -> Settings:
    return Settings(database_url=settings.database_url)


def _endpoint(engine, tenant: str, url: str, **opts):
    with engine.begin() as conn:
        return estore.create_endpoint(
            conn, tenant, url, callbacks.new_secret(), retry_schedule=[0], **opts
        )


def _post(client, src, payload: dict, key: str):
    body = body_of(payload)
    return client.post(src.path, data=body, headers=hmac_headers("s3cret", body, key))


def _event(engine, public_id: str):
    with engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT state, filter_reason, attempts, finished_at FROM events"
                " WHERE public_id = :p"
            ),
            {"p": public_id},
        ).one()


def _count(engine, sql: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text(sql)).scalar_one())


def _deliver_all(engine, sink: Sink, endpoint_id: int, expected: int) -> None:
    def done() -> bool:
        deliver_once(engine, endpoint_id, allow_private=True)
        return len(sink.received) >= expected

    wait_for(done)


def _filtered_metric(tenant: str, source: str) -> float:
    value = REGISTRY.get_sample_value(
        "inbox_events_filtered_total", {"tenant": tenant, "source": source}
    )
    return value or 0.0


def test_a_filtered_event_is_stored_answered_never_run_and_counted(
    client, engine, wsettings, make_source, sink
) -> None:
    src = make_source(playbook="forward", event_type_path="type", filter=BIG)
    ep = _endpoint(engine, src.tenant, sink.url("/cb"))
    before = _filtered_metric(src.tenant, src.name)

    small = _post(client, src, {"type": "payment", "amount": 5}, "k-small")
    big = _post(client, src, {"type": "payment", "amount": 500}, "k-big")
    # Both answered with the scheme's answer: the provider stops retrying either.
    assert small.status_code == big.status_code == 202
    assert small.get_json()["status"] == "filtered"
    assert big.get_json()["status"] == "accepted"
    assert _filtered_metric(src.tenant, src.name) == before + 1

    # A retry of the filtered delivery is a duplicate of it, not a second event.
    again = _post(client, src, {"type": "payment", "amount": 5}, "k-small")
    assert again.status_code == 202 and again.headers.get("Idempotent-Replayed") == "true"

    row = _event(engine, small.get_json()["id"])
    assert row.state == "filtered"
    assert row.filter_reason == f"filter is false: {BIG}"
    assert row.finished_at is not None

    # A real drain runs every due event: the big one only.
    wait_for(
        lambda: (
            drain_once(Runtime(wsettings, engine)).claimed == 0
            and _event(engine, big.get_json()["id"]).state == "completed"
        )
    )
    _deliver_all(engine, sink, ep.id, 1)
    assert len(sink.received) == 1
    row = _event(engine, small.get_json()["id"])
    assert (row.state, row.attempts) == ("filtered", 0)
    assert (
        _count(
            engine,
            "SELECT count(*) FROM steps s JOIN events e ON e.id = s.event_id"
            f" WHERE e.public_id = '{small.get_json()['id']}'",
        )
        == 0
    )


def test_replay_runs_a_filtered_event_despite_the_filter(
    client, engine, wsettings, make_source, sink
) -> None:
    src = make_source(playbook="forward", event_type_path="type", filter=BIG)
    ep = _endpoint(engine, src.tenant, sink.url("/cb"))
    public_id = _post(client, src, {"type": "payment", "amount": 5}, "k1").get_json()["id"]
    drain_once(Runtime(wsettings, engine))
    assert _event(engine, public_id).state == "filtered"

    with engine.begin() as conn:
        assert operator.replay(conn, [public_id], "alice") == [public_id]
        audit = conn.execute(
            text("SELECT detail FROM audit_log WHERE action = 'replay' ORDER BY id DESC LIMIT 1")
        ).scalar_one()
    assert audit["state_before"] == "filtered"
    assert audit["filter_reason"] == f"filter is false: {BIG}"

    wait_for(
        lambda: (
            drain_once(Runtime(wsettings, engine)).claimed == 0
            and _event(engine, public_id).state == "completed"
        )
    )
    _deliver_all(engine, sink, ep.id, 1)
    assert len(sink.received) == 1
    # A second replay finds it completed: nothing moves.
    with engine.begin() as conn:
        assert operator.replay(conn, [public_id], "alice") == []


def test_a_filter_that_cannot_be_evaluated_filters_with_the_reason(
    client, engine, make_source
) -> None:
    src = make_source(filter="body.customer.tier == 'gold'")
    resp = _post(client, src, {"amount": 1}, "k")
    assert resp.status_code == 202
    row = _event(engine, resp.get_json()["id"])
    assert row.state == "filtered"
    assert "no such key 'customer'" in row.filter_reason


def test_a_filter_over_headers(client, engine, make_source) -> None:
    src = make_source(filter="headers['x-env'] == 'prod'")
    body = body_of({"n": 1})
    prod = client.post(
        src.path, data=body, headers={**hmac_headers("s3cret", body, "a"), "X-Env": "prod"}
    )
    test = client.post(
        src.path, data=body, headers={**hmac_headers("s3cret", body, "b"), "X-Env": "test"}
    )
    assert _event(engine, prod.get_json()["id"]).state == "received"
    assert _event(engine, test.get_json()["id"]).state == "filtered"


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ("body.amount >", "Syntax error"),
        ("request.amount > 1", "unknown variable request"),
    ],
)
def test_an_invalid_filter_is_refused_by_create_and_update(
    engine, make_source, expr: str, says: str
) -> None:
    src = make_source()
    runner = CliRunner()
    created = runner.invoke(
        main,
        [
            "sources",
            "create",
            "--tenant",
            src.tenant,
            "--name",
            "other",
            "--scheme",
            "none",
            "--filter",
            expr,
        ],
    )
    updated = runner.invoke(
        main, ["sources", "update", f"{src.tenant}/{src.name}", "--filter", expr]
    )
    for result in (created, updated):
        assert result.exit_code != 0
        assert says in result.output
        assert len(result.output.strip().splitlines()) == 1, result.output
    with engine.connect() as conn:
        assert (
            conn.execute(text("SELECT count(*) FROM sources WHERE name = 'other'")).scalar_one()
            == 0
        )
        options = conn.execute(
            text("SELECT options FROM sources WHERE id = :i"), {"i": src.id}
        ).scalar_one()
    assert "filter" not in options


def test_update_sets_a_valid_filter(engine, make_source) -> None:
    src = make_source()
    result = CliRunner().invoke(
        main, ["sources", "update", f"{src.tenant}/{src.name}", "--filter", BIG]
    )
    assert result.exit_code == 0, result.output
    with engine.connect() as conn:
        options = conn.execute(
            text("SELECT options FROM sources WHERE id = :i"), {"i": src.id}
        ).scalar_one()
    assert options["filter"] == BIG


def test_an_endpoint_filter_skips_the_callback_and_counts_it(
    client, engine, wsettings, make_source, sink
) -> None:
    src = make_source(playbook="forward", event_type_path="type")
    wanted = _endpoint(
        engine,
        src.tenant,
        sink.url("/wanted"),
        filter="type == 'case.opened' && payload.priority >= 2",
    )
    other = _endpoint(engine, src.tenant, sink.url("/all"))
    before = (
        REGISTRY.get_sample_value("inbox_callbacks_filtered_total", {"tenant": src.tenant}) or 0.0
    )
    for key, payload in (
        ("a", {"type": "case.opened", "priority": 3}),
        ("b", {"type": "case.opened", "priority": 1}),
        ("c", {"type": "case.closed", "priority": 3}),
    ):
        assert _post(client, src, payload, key).status_code == 202

    def drained() -> bool:
        drain_once(Runtime(wsettings, engine))
        return (
            _count(
                engine,
                f"SELECT count(*) FROM events WHERE state = 'completed' AND source_id = {src.id}",
            )
            == 3
        )

    wait_for(drained)
    assert _count(engine, f"SELECT count(*) FROM deliveries WHERE endpoint_id = {wanted.id}") == 1
    assert _count(engine, f"SELECT count(*) FROM deliveries WHERE endpoint_id = {other.id}") == 3
    _deliver_all(engine, sink, wanted.id, 1)
    _deliver_all(engine, sink, other.id, 4)
    paths = sorted(r.path for r in sink.received)
    assert paths == ["/all", "/all", "/all", "/wanted"]
    after = REGISTRY.get_sample_value("inbox_callbacks_filtered_total", {"tenant": src.tenant})
    assert after == before + 2


def test_an_invalid_endpoint_filter_is_refused(engine, make_source, sink) -> None:
    src = make_source()
    result = CliRunner().invoke(
        main,
        [
            "endpoints",
            "create",
            "--tenant",
            src.tenant,
            "--url",
            sink.url("/x"),
            "--filter",
            "payload.n >",
        ],
    )
    assert result.exit_code != 0
    assert "Syntax error" in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert _count(engine, "SELECT count(*) FROM endpoints WHERE url LIKE '%/x'") == 0


def test_the_console_lists_shows_and_replays_a_filtered_event(
    client, engine, wsettings, make_source, sink
) -> None:
    src = make_source(playbook="forward", event_type_path="type", filter=BIG)
    ep = _endpoint(engine, src.tenant, sink.url("/cb"))
    evt = _post(client, src, {"type": "payment", "amount": 5}, "k1").get_json()["id"]
    runs = _post(client, src, {"type": "payment", "amount": 500}, "k2").get_json()["id"]
    sign_in(client, new_token(engine, "alice-oncall", "operator"))

    listed = client.get("/ui/events?state=filtered").get_data(as_text=True)
    assert evt in listed and runs not in listed
    page = client.get(f"/ui/events/{evt}").get_data(as_text=True)
    assert 'id="filter-reason"' in page and "filter is false: body.amount &gt; 100" in page
    assert f'href="/ui/events/{evt}/replay"' in page

    resp = post(client, f"/ui/events/{evt}/replay", f"/ui/events/{evt}/replay")
    assert resp.status_code == 302
    assert _event(engine, evt).state == "received"
    wait_for(
        lambda: (
            drain_once(Runtime(wsettings, engine)).claimed == 0
            and _event(engine, evt).state == "completed"
        )
    )
    _deliver_all(engine, sink, ep.id, 2)  # the event that ran at once, and the replayed one
    assert len(sink.received) == 2
