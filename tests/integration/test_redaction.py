"""Redaction against real PostgreSQL, by CLI and API: the body goes, its SHA-256, the row,
its steps, attempts, deliveries and audit stay; a legal hold refuses it (naming the hold)
until it is released; an unfinished event is refused; a second request answers as done."""

from __future__ import annotations

import datetime as dt
import hashlib

from click.testing import CliRunner
from sqlalchemy import Engine, text

from inbox.cli import main
from inbox.domain import ledger
from inbox.store.write import tokens as tstore
from tests.integration.test_partitions import add_day, today

BODY = b'{"patient": "Jane Roe", "amount": 42}'
SHA = hashlib.sha256(BODY).hexdigest()


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def operator(engine: Engine, name: str = "alice", tenant: str | None = None):
    with engine.begin() as conn:
        _, secret = tstore.create_token(conn, name, "operator", tenant)
    return {"Authorization": f"Bearer {secret}"}


def an_event(engine, made_days, src, state: str = "completed", n: int = 1) -> tuple[int, str]:
    """An event of a day long past, with a real body and its hash: (id, public id)."""
    day = today(engine) - dt.timedelta(days=300)
    # The day is made once (and dropped once, by the made_days fixture).
    add_day(engine, made_days if day not in made_days else [], day, src, n, event_state=state)
    event_id = ledger.make_id(day, n)
    with engine.begin() as conn:
        public_id = conn.execute(
            text(
                "UPDATE events SET body = :b, body_sha256 = :h WHERE id = :id RETURNING public_id"
            ),
            {"b": BODY, "h": bytes.fromhex(SHA), "id": event_id},
        ).scalar_one()
    return event_id, str(public_id)


def stored(engine: Engine, event_id: int) -> dict:
    with engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT body, encode(body_sha256, 'hex') AS sha, state,"
                " (SELECT count(*) FROM steps WHERE event_id = e.id) AS steps,"
                " (SELECT count(*) FROM event_attempts WHERE event_id = e.id) AS attempts,"
                " (SELECT count(*) FROM deliveries WHERE event_id = e.id) AS deliveries"
                " FROM events e WHERE id = :id"
            ),
            {"id": event_id},
        ).one()
    return dict(row._mapping)


def redactions(engine: Engine, event_id: int) -> list[tuple[str, dict]]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT actor, detail FROM audit_log WHERE subject_kind = 'event'"
                " AND subject_id = :id AND action = 'redacted' ORDER BY id"
            ),
            {"id": event_id},
        )
        return [(r.actor, r.detail) for r in rows]


def test_a_redaction_removes_the_body_and_keeps_the_hash_rows_and_audit(
    engine, make_source, made_days, client
):
    src = make_source(tenant="acme")
    event_id, evt = an_event(engine, made_days, src)
    before = stored(engine, event_id)
    assert bytes(before["body"]) == BODY

    result = run("events", "redact", evt, "--reason", "GDPR erasure 881", "--actor", "alice")
    assert result.exit_code == 0, result.output
    assert f"sha256 {SHA} kept" in result.output

    after = stored(engine, event_id)
    assert after["body"] is None
    assert after["sha"] == SHA
    assert {k: after[k] for k in ("state", "steps", "attempts", "deliveries")} == {
        k: before[k] for k in ("state", "steps", "attempts", "deliveries")
    }
    [(actor, detail)] = redactions(engine, event_id)
    assert actor == "alice"
    assert detail["reason"] == "GDPR erasure 881"
    assert detail["body_sha256"] == SHA and detail["bytes_removed"] == len(BODY)

    # Again, by CLI and by API: done already, nothing more written.
    again = run("events", "redact", evt, "--reason", "again", "--actor", "bob")
    assert again.exit_code == 0 and "already removed" in again.output, again.output
    resp = client.post(
        f"/api/v1/events/{evt}/redact", json={"reason": "again"}, headers=operator(engine)
    )
    assert resp.status_code == 200, resp.get_json()
    assert resp.get_json()["already_redacted"] is True
    assert resp.get_json()["body_sha256"] == SHA
    assert len(redactions(engine, event_id)) == 1
    shown = run("events", "show", evt)
    assert f"removed by redaction, sha256 {SHA}" in shown.output, shown.output


def test_a_held_event_is_refused_until_the_hold_is_released(engine, make_source, made_days, client):
    src = make_source(tenant="acme")
    event_id, evt = an_event(engine, made_days, src)
    placed = run(
        "holds", "place", "--source", "acme/" + src.name, "--reason", "matter 17", "--actor", "lee"
    )
    assert placed.exit_code == 0, placed.output
    [hold_id] = [line.split()[1] for line in placed.output.splitlines() if line.startswith("id ")]
    headers = operator(engine)

    refused = run("events", "redact", evt, "--reason", "erasure", "--actor", "alice")
    assert refused.exit_code == 1
    [line] = refused.output.strip().splitlines()
    assert "legal hold" in line and hold_id in line, line

    resp = client.post(f"/api/v1/events/{evt}/redact", json={"reason": "erasure"}, headers=headers)
    assert resp.status_code == 409
    error = resp.get_json()["error"]
    assert error["code"] == "event_held" and error["holds"] == [hold_id]
    assert hold_id in error["message"]

    assert bytes(stored(engine, event_id)["body"]) == BODY
    assert redactions(engine, event_id) == []

    released = run("holds", "release", hold_id, "--actor", "lee")
    assert released.exit_code == 0, released.output
    resp = client.post(f"/api/v1/events/{evt}/redact", json={"reason": "erasure"}, headers=headers)
    assert resp.status_code == 200, resp.get_json()
    assert resp.get_json() == {
        "id": evt,
        "redacted": True,
        "already_redacted": False,
        "body_sha256": SHA,
        "bytes_removed": len(BODY),
    }
    assert stored(engine, event_id)["body"] is None
    assert redactions(engine, event_id) == [
        ("alice", {"public_id": evt, "reason": "erasure", "body_sha256": SHA,
                   "bytes_removed": len(BODY)})
    ]  # fmt: skip


def test_an_unfinished_event_is_refused(engine, make_source, made_days, client):
    src = make_source(tenant="acme")
    headers = operator(engine)
    for n, state in enumerate(("received", "processing"), start=1):
        event_id, evt = an_event(engine, made_days, src, state=state, n=n)
        refused = run("events", "redact", evt, "--reason", "erasure")
        assert refused.exit_code == 1
        [line] = refused.output.strip().splitlines()
        assert f"is {state}" in line and "worker still needs its body" in line, line
        resp = client.post(
            f"/api/v1/events/{evt}/redact", json={"reason": "erasure"}, headers=headers
        )
        assert resp.status_code == 409
        assert resp.get_json()["error"]["code"] == "event_unfinished"
        assert bytes(stored(engine, event_id)["body"]) == BODY
        assert redactions(engine, event_id) == []


def test_bad_requests_are_refused_and_change_nothing(engine, make_source, made_days, client):
    src = make_source(tenant="acme")
    event_id, evt = an_event(engine, made_days, src)
    headers = operator(engine)
    other = operator(engine, "mallory", tenant=make_source().tenant)
    url = f"/api/v1/events/{evt}/redact"
    for body, status in (
        (None, 400),
        ({}, 400),
        ({"reason": "  "}, 400),
        ({"reason": 5}, 400),
        ({"reason": "x", "body": "y"}, 400),
    ):
        resp = client.post(url, json=body, headers=headers)
        assert resp.status_code == status, (body, resp.get_json())
        assert resp.get_json()["error"]["message"]
    assert client.post(url, json={"reason": "x"}, headers=other).status_code == 404
    assert client.post(url, json={"reason": "x"}).status_code == 401
    resp = client.post("/api/v1/events/evt_nope/redact", json={"reason": "x"}, headers=headers)
    assert resp.status_code in (400, 404)
    assert bytes(stored(engine, event_id)["body"]) == BODY
    assert redactions(engine, event_id) == []


def test_a_hold_placed_during_a_redaction_is_seen_or_waits(engine, make_source, made_days):
    """The hold's transaction is open (not committed) when the redaction starts: the
    redaction waits for it, then sees the hold and refuses; the body stays."""
    import threading

    from inbox.domain.holds import EventHeld
    from inbox.store.write import holds as hstore
    from inbox.store.write import redaction

    src = make_source(tenant="acme")
    event_id, evt = an_event(engine, made_days, src)
    outcome: list[object] = []

    with engine.begin() as hold_tx:
        hstore.place(hold_tx, "acme", "lee", "matter 18", event=evt)

        def redact() -> None:
            try:
                with engine.begin() as conn:
                    outcome.append(redaction.redact(conn, evt, "alice", "erasure"))
            except EventHeld as exc:
                outcome.append(exc)

        worker = threading.Thread(target=redact)
        worker.start()
        worker.join(1.0)  # a bound on how long it may run while the hold is open
        assert worker.is_alive() and outcome == [], "the redaction did not wait for the hold"
    worker.join(30)
    assert not worker.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], EventHeld), outcome
    assert bytes(stored(engine, event_id)["body"]) == BODY
    assert redactions(engine, event_id) == []
