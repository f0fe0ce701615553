"""The payload-bearing columns beside the event's own: a delivery's body and a synchronous
event's stored answer are sealed under the event's key (no plaintext in the table), the
courier and the duplicate path open them, and an erasure reaches them too."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, text
from standardwebhooks import Webhook

from inbox.cli import main
from inbox.domain import callbacks
from inbox.infra import envelope
from inbox.infra.config import Settings
from inbox.services.courier import deliver_once
from inbox.services.drain import drain_once
from inbox.services.runtime import Runtime
from inbox.store.db import sealing
from inbox.store.write import endpoints as estore
from inbox.store.write import queue
from tests.helpers import body_of, hmac_headers, wait_for
from tests.sink import Answer


@pytest.fixture
def keys(engine: Engine) -> Iterator[sealing.PayloadKeys]:
    """Sealing on for this test's engine (the suite stores in clear)."""
    found = sealing.for_engine(engine)
    found.clear()
    was, found.enabled = found.enabled, True
    yield found
    found.enabled = was
    found.clear()


@pytest.fixture
def wsettings(settings: Settings) -> Settings:
    return Settings(database_url=settings.database_url)


def send(client, src, payload, key, **headers):
    body = body_of(payload)
    return client.post(src.path, data=body, headers=hmac_headers("s3cret", body, key, **headers))


def deliveries(engine: Engine):
    with engine.connect() as conn:
        return conn.execute(text("SELECT body, state, last_error FROM deliveries")).all()


def test_a_delivery_body_is_sealed_and_the_courier_sends_it_in_clear(
    client, engine, wsettings, sink, make_source, keys
):
    src = make_source(playbook="forward", event_type_path="type", subject_path="account")
    secret = callbacks.new_secret()
    with engine.begin() as conn:
        ep = estore.create_endpoint(
            conn, src.tenant, sink.script("/hook", Answer(200)), secret, retry_schedule=[0]
        )
    assert send(client, src, {"type": "fraud.alert", "account": "acct-7"}, "k1").status_code == 202
    drain_once(Runtime(wsettings, engine))
    [stored] = deliveries(engine)
    raw = bytes(stored.body)
    assert b"acct-7" not in raw and envelope.tagged_key(raw) is not None
    with engine.connect() as conn:
        event_key = conn.execute(text("SELECT key_id FROM events")).scalar_one()
    assert envelope.tagged_key(raw) == event_key  # the event's own key

    wait_for(lambda: deliver_once(engine, ep.id, allow_private=True).delivered == 1)
    [got] = sink.at("/hook")
    Webhook(secret).verify(got.body, got.headers)  # signed over the plaintext
    assert json.loads(got.body)["data"]["account"] == "acct-7"


def test_a_delivery_whose_key_was_erased_is_failed_not_sent(
    client, engine, wsettings, sink, make_source, keys
):
    src = make_source(playbook="forward", event_type_path="type", subject_path="account")
    with engine.begin() as conn:
        ep = estore.create_endpoint(
            conn, src.tenant, sink.script("/hook", Answer(200)), callbacks.new_secret()
        )
    send(client, src, {"type": "fraud.alert", "account": "acct-9"}, "k1")
    drain_once(Runtime(wsettings, engine))  # the event is finished, its delivery still pending
    said = CliRunner().invoke(
        main,
        ["erase", "--tenant", src.tenant, "--subject", "acct-9", "--reason", "GDPR"],
        catch_exceptions=False,
    )
    assert said.exit_code == 0, said.output
    deliver_once(engine, ep.id, allow_private=True)
    [stored] = deliveries(engine)
    assert (stored.state, stored.last_error) == ("failed", "payload erased")
    assert sink.at("/hook") == []


def test_a_synchronous_answer_is_sealed_and_a_copy_gets_it_in_clear(
    client, engine, wsettings, make_source, keys
):
    src = make_source(event_type_path="type")
    box: dict[str, object] = {}

    def original() -> None:
        box["resp"] = send(client, src, {"type": "t", "n": 1}, "sync-1", Prefer="wait=10")

    t = threading.Thread(target=original)
    t.start()
    wait_for(lambda: _count(engine, "SELECT count(*) FROM events") > 0)
    drain_once(Runtime(wsettings, engine))
    t.join(15)
    resp = box["resp"]
    assert resp.status_code == 200 and resp.json["status"] == "completed"
    with engine.connect() as conn:
        raw = bytes(conn.execute(text("SELECT response_body FROM events")).scalar_one())
    assert envelope.tagged_key(raw) is not None and b"completed" not in raw
    copy = send(client, src, {"type": "t", "n": 1}, "sync-1")
    assert copy.status_code == 200 and copy.data == resp.data  # opened for the copy
    assert copy.headers["Idempotent-Replayed"] == "true"


def test_the_single_completion_seals_the_answer_too(client, engine, make_source, keys):
    """queue.complete (one event, not the batch): the answer sealed, read back in clear."""
    from inbox.store.reads.events import stored_response

    src = make_source(event_type_path="type")
    assert send(client, src, {"type": "t"}, "k1").status_code == 202
    with engine.begin() as conn:
        [c] = queue.claim(conn, "w", 1, 30)
        queue.load(conn, c)
        queue.complete(conn, c, "completed", {}, None, b'{"secret":"answer"}')
    with engine.connect() as conn:
        raw = bytes(conn.execute(text("SELECT response_body FROM events")).scalar_one())
        assert b"answer" not in raw
        assert stored_response(conn, c.id).body == b'{"secret":"answer"}'


def _count(engine: Engine, sql: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text(sql)).scalar_one())


def test_the_sealing_job_seals_old_deliveries_and_answers_too(
    client, engine, wsettings, sink, make_source
):
    """Rows stored in clear before sealing was on: the job (``inbox payloads seal``) seals a
    delivery's body and a synchronous answer under the event's key, and both still read."""
    from inbox.services import sealing_job
    from inbox.store.reads.events import stored_response

    fwd = make_source(playbook="forward", event_type_path="type")
    secret = callbacks.new_secret()
    with engine.begin() as conn:
        ep = estore.create_endpoint(
            conn, fwd.tenant, sink.script("/hook", Answer(200)), secret, retry_schedule=[0]
        )
    send(client, fwd, {"type": "fraud.alert", "account": "acct-3"}, "k1")
    drain_once(Runtime(wsettings, engine))
    [before] = deliveries(engine)
    assert b"acct-3" in bytes(before.body)  # stored in clear (sealing off in the suite)
    sync = make_source(event_type_path="type")
    box: dict[str, object] = {}
    t = threading.Thread(
        target=lambda: box.update(r=send(client, sync, {"type": "t"}, "s1", Prefer="wait=10"))
    )
    t.start()
    wait_for(lambda: _count(engine, "SELECT count(*) FROM events") > 1)
    drain_once(Runtime(wsettings, engine))
    t.join(15)
    answer = box["r"].data

    assert sealing_job.run(Runtime(Settings(), engine)) == 2
    [after] = deliveries(engine)
    assert envelope.tagged_key(bytes(after.body)) is not None and b"acct-3" not in bytes(after.body)
    with engine.connect() as conn:
        row = conn.execute(text("SELECT id, response_body FROM events WHERE sync")).one()
        assert envelope.tagged_key(bytes(row.response_body)) is not None
        assert stored_response(conn, row.id).body == answer
    wait_for(lambda: deliver_once(engine, ep.id, allow_private=True).delivered == 1)
    [got] = sink.at("/hook")
    Webhook(secret).verify(got.body, got.headers)
    assert json.loads(got.body)["data"]["account"] == "acct-3"
