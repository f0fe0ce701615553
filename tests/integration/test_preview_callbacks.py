"""A replay's dry run tells the truth about callbacks: it applies each endpoint's filter
and state as the outbox will (a filtered endpoint gets nothing; a disabled one's callback
is written held), and previews the events ``inbox replay`` replays, filtered ones too. The
real replay then writes exactly the deliveries the preview listed."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from inbox.infra.config import Settings
from inbox.services.drain import drain_once
from inbox.services.preview import preview
from inbox.services.runtime import Runtime
from inbox.store.write import endpoints as estore
from inbox.store.write import operator
from tests.helpers import body_of, hmac_headers, wait_for


@pytest.fixture
def wsettings(settings: Settings) -> Settings:
    return Settings(database_url=settings.database_url)


def test_the_preview_of_a_filtered_event_lists_the_deliveries_the_replay_writes(
    client, engine, wsettings, make_source, sink
):
    src = make_source(playbook="forward", event_type_path="type", filter="body.amount > 100")
    with engine.begin() as conn:
        made = {
            name: estore.create_endpoint(conn, src.tenant, sink.url(f"/{name}"), "whsec_x", **o)
            for name, o in (
                ("big", {"filter": "payload.amount >= 10"}),
                ("all", {}),
                ("off", {"enabled": False}),
                ("other", {"event_types": ["refund"]}),
            )
        }
    body = body_of({"type": "payment", "amount": 5})
    resp = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, "k1"))
    public_id = resp.get_json()["id"]
    drain_once(Runtime(wsettings, engine))
    with engine.connect() as conn:
        state = conn.execute(
            text("SELECT state FROM events WHERE public_id = :p"), {"p": public_id}
        ).scalar_one()
        assert state == "filtered"
        plan = preview(conn, [public_id]).to_dict()
    [ev] = plan["events"]
    assert ev["replayable"] and ev["problem"] is None  # inbox replay runs a filtered event
    got = {cb["endpoint"]: cb["delivery"] for cb in ev["callbacks"]}
    assert got == {
        made["big"].public_id: "filtered",  # its filter is false for this payload
        made["all"].public_id: "sent",
        made["off"].public_id: "held",
    }
    totals = plan["totals"]
    assert (totals["callbacks"], totals["callbacks_held"], totals["callbacks_filtered"]) == (
        2,
        1,
        1,
    )

    with engine.begin() as conn:
        assert operator.replay(conn, [public_id], "alice") == [public_id]
    wait_for(
        lambda: drain_once(Runtime(wsettings, engine)).claimed == 0 and _done(engine, public_id)
    )
    with engine.connect() as conn:
        written = dict(
            conn.execute(
                text(
                    "SELECT ep.public_id, d.state FROM deliveries d"
                    " JOIN endpoints ep ON ep.id = d.endpoint_id"
                )
            ).all()
        )
    assert written == {made["all"].public_id: "pending", made["off"].public_id: "held"}
    assert len(written) == totals["callbacks"]


def _done(engine, public_id: str) -> bool:
    with engine.connect() as conn:
        return (
            conn.execute(
                text("SELECT state FROM events WHERE public_id = :p"), {"p": public_id}
            ).scalar_one()
            == "completed"
        )
