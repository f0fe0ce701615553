"""Replays are marked: the event's replay number, what a playbook sees, webhook-replay."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from standardwebhooks import Webhook

from inbox import PermanentError, Playbook, StepContext
from inbox.domain import callbacks
from inbox.domain.playbooks import Registry
from inbox.infra.config import Settings
from inbox.services.courier import deliver_once
from inbox.services.drain import drain_once
from inbox.services.runtime import Runtime
from tests.helpers import body_of, hmac_headers
from tests.integration.test_api import make_token
from tests.integration.test_callbacks import endpoint
from tests.integration.test_ui import CSRF, grab, new_token, sign_in


class Case:
    """A two-step playbook: `open` calls back; `close` fails while `broken` says so."""

    def __init__(self) -> None:
        self.broken = 2  # fail `close` in the original and in the first replay
        self.seen: list[tuple[str, int]] = []
        self.reg = Registry()
        pb = self.reg.register(Playbook("case"))

        @pb.step("open")
        def open_(ctx: StepContext) -> dict[str, Any]:
            self.seen.append(("open", ctx.replay))
            ctx.send("case.opened", {"case": ctx.payload["case"]})
            return {"opened": True}

        @pb.step("close")
        def close(ctx: StepContext) -> dict[str, Any]:
            self.seen.append(("close", ctx.replay))
            ctx.send("case.closed", {"case": ctx.payload["case"], "replay": ctx.replay})
            if self.broken > ctx.replay:
                raise PermanentError("the case system refused")
            return {"closed": True}


def test_a_replay_is_numbered_seen_by_the_playbook_and_marked_downstream(
    client, engine, settings, make_source, sink
):
    case = Case()
    src = make_source(playbook="case")
    secret = callbacks.new_secret()
    ep = endpoint(engine, src.tenant, sink.script("/cases"), secret)
    op = make_token(engine, "alice", "operator")
    body = body_of({"case": "c-1"})
    resp = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, "k1"))
    evt = resp.json["id"]
    wsettings = Settings(database_url=settings.database_url)

    def run() -> None:
        drain_once(Runtime(wsettings, engine), reg=case.reg)
        while deliver_once(engine, ep.id, allow_private=True).claimed:
            pass

    run()  # the original: open completes and calls back, close fails for good
    for expected in (1, 2):
        replayed = client.post(f"/api/v1/events/{evt}/replay", headers=op)
        assert replayed.status_code == 200, replayed.json
        run()
        detail = client.get(f"/api/v1/events/{evt}", headers=op).json
        assert detail["replay"] == expected
    assert detail["state"] == "completed"
    # A completed step never runs again; the playbook saw which run it was in.
    assert case.seen == [("open", 0), ("close", 0), ("close", 1), ("close", 2)]
    assert {s["name"]: s["replay"] for s in detail["steps"]} == {"open": 0, "close": 2}

    # Attempt history stays: each replay's audit row says what it followed.
    audit = [a for a in detail["audit"] if a["action"] == "replay"]
    assert [(a["actor"], a["detail"]["replay"]) for a in audit] == [("alice", 1), ("alice", 2)]
    assert all(a["detail"]["attempts_before"] == 1 for a in audit)
    assert all(a["detail"]["error_before"] == "PermanentError" for a in audit)

    # Downstream: the original's callback is unmarked; the re-run step's carries its
    # replay number, keeps the stable webhook-id, and still verifies.
    got = sink.at("/cases")
    assert len(got) == 2  # a failed step's callbacks are never written
    opened, closed = got
    assert "webhook-replay" not in opened.headers
    assert closed.headers["webhook-replay"] == "2"
    assert closed.headers["webhook-id"] == callbacks.delivery_id(evt, "close", 0, ep.id)
    for r in got:
        Webhook(secret).verify(r.body, r.headers)  # raises if the signature is not valid
    assert [d["replay"] for d in detail["deliveries"]] == [0, 2]


def test_the_console_shows_original_and_replay(client, engine, settings, make_source):
    case = Case()
    case.broken = 1
    src = make_source(playbook="case")
    body = body_of({"case": "c-2"})
    evt = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, "k2")).json["id"]
    wsettings = Settings(database_url=settings.database_url)
    drain_once(Runtime(wsettings, engine), reg=case.reg)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT replay FROM events")).scalar_one() == 0
    sign_in(client, new_token(engine, "bob", "operator"))
    original = client.get(f"/ui/events/{evt}").get_data(as_text=True)
    assert '<dd id="replay-mark">original</dd>' in original
    page = client.get(f"/ui/events/{evt}/replay").get_data(as_text=True)
    client.post(f"/ui/events/{evt}/replay", data={"csrf": grab(CSRF, page)})
    drain_once(Runtime(wsettings, engine), reg=case.reg)
    shown = client.get(f"/ui/events/{evt}").get_data(as_text=True)
    assert "replay 1</span>" in shown and "Replay 1 by bob" in shown
    assert 'class="step-run">original</td>' in shown  # open ran in the original
    assert 'class="step-run">replay 1</td>' in shown  # close ran in the replay
    assert "after 1 attempt" in shown
