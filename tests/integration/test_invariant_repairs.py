"""The self-audit's repairs that write, and its full pass a day at a time, against a real
database: a deleted delivery is reported with its intent, proposed with a preview, written
held only when a second operator approves (never by the proposer), audited and checked
again; a lane held by a stale block is released the same way; the full pass walks the
ledger a day at a time in transactions of its own, finds a violation in an old day, and
goes on where a failed walk stopped."""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, text

from inbox.cli import main
from inbox.domain import ledger
from inbox.domain.errors import BadRequest, Forbidden
from inbox.domain.invariants import Invariant
from inbox.domain.records import Endpoint
from inbox.services import audit
from inbox.services.drain import drain_once
from inbox.services.runtime import Runtime
from inbox.store.reads import invariants as checks
from tests.helpers import body_of, hmac_headers
from tests.integration.ledger_support import put_event
from tests.integration.test_invariants import (  # noqa: F401  (wsettings: a fixture)
    corrupt,
    endpoint,
    found,
    one,
    send,
    wsettings,
)
from tests.integration.test_partitions import add_day, cover_open_days, today
from tests.integration.test_payload_keys import keys  # noqa: F401  (fixture)

I = Invariant  # noqa: E741


def deliveries_of(engine, endpoint_id: int):
    with engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT id, public_id, endpoint_id, event_id, event_type, body, state, replay,"
                " trace_context FROM deliveries WHERE endpoint_id = :e ORDER BY id"
            ),
            {"e": endpoint_id},
        ).all()


def repair_actions(engine) -> list[tuple[str, str]]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT actor, action FROM audit_log WHERE subject_kind = 'invariant_repair'"
                " ORDER BY id"
            )
        ).all()
    return [(r.actor, r.action) for r in rows]


@dataclass
class Repairs:
    """What every test here starts from: the app's client, the database, a runtime of the
    worker's settings, and the sources it makes on demand."""

    client: Any
    engine: Engine
    rt: Runtime
    make_source: Any

    @functools.cached_property
    def forward(self) -> Any:
        """A source whose playbook forwards each event as a callback."""
        return self.make_source(playbook="forward", event_type_path="type")

    def lanes(self) -> Any:
        """A source that runs one event of a business key at a time."""
        return self.make_source(
            playbook="forward", business_key_paths=["account"], serialize_by_business_key=True
        )

    def decided(self, *idempotency_keys: str) -> None:
        """Events of ``forward`` with these keys, sent and run to their end."""
        for key in idempotency_keys:
            send(self.client, self.forward, key)
        drain_once(self.rt)

    def lose_a_delivery(self) -> tuple[Endpoint, Any]:
        """An endpoint whose one delivery (returned as it was) is deleted as no code path
        would: the break every repair of a missing delivery starts from."""
        ep = endpoint(self.engine, self.forward.tenant)
        self.decided("k1")
        [before] = deliveries_of(self.engine, ep.id)
        corrupt(self.engine, "DELETE FROM deliveries WHERE endpoint_id = :e", e=ep.id)
        return ep, before

    def found(self, invariant: Invariant) -> list[Any]:
        return found(self.engine, self.rt.settings, invariant)[invariant.value]

    def open_one(self, invariant: Invariant) -> checks.Violation:
        """The one open violation of ``invariant`` a full pass records."""
        audit.run(self.rt, [invariant], full=True)
        with self.engine.connect() as conn:
            [v] = checks.open_violations(conn, invariant.value)
        return v

    def propose(self, actor: str, v: checks.Violation) -> Any:
        return audit.propose(self.rt, actor, v.id)

    def approve(self, actor: str, repair: Any) -> Any:
        return audit.review(self.rt, actor, repair.public_id, approve=True)

    def run(self, *invariants: Invariant, **how: bool) -> Any:
        return audit.run(self.rt, list(invariants), **how)


@pytest.fixture
def repairs(client, engine, wsettings, make_source) -> Repairs:  # noqa: F811
    return Repairs(client, engine, Runtime(wsettings, engine), make_source)


def test_a_deleted_delivery_is_written_held_once_a_second_operator_approves(
    repairs, engine, database_url
):
    kept = endpoint(engine, repairs.forward.tenant)
    lost, before = repairs.lose_a_delivery()

    # Reported with the right rows: the intent of the endpoint that lost its delivery.
    [v] = repairs.found(I.DELIVERY_PER_ENDPOINT)
    assert v.subject == f"intent:{before.public_id}"
    intent = one(v.rows, table="callback_intents")
    assert intent["endpoint_id"] == lost.id and intent["problem"] == "no delivery for this endpoint"
    violation = repairs.open_one(I.DELIVERY_PER_ENDPOINT)

    proposed = repairs.propose("alice", violation)
    assert proposed.kind == "write_held_delivery" and proposed.status == "awaiting_approval"
    [plan] = proposed.preview["deliveries"]
    assert plan["endpoint"]["id"] == lost.id and plan["endpoint"]["enabled"] is True
    assert plan["intent"]["public_id"] == before.public_id
    assert plan["delivery"]["state"] == "held"
    assert plan["delivery"]["body_sha256"] == hashlib.sha256(bytes(before.body)).hexdigest()
    assert "order.paid" in json.dumps(plan) and '"n"' not in json.dumps(proposed.preview)
    assert deliveries_of(engine, lost.id) == []  # proposed, nothing written

    with pytest.raises(Forbidden):  # the proposer cannot approve their own repair
        repairs.approve("alice", proposed)
    assert deliveries_of(engine, lost.id) == []

    env = {"DATABASE_URL": database_url}
    r = CliRunner().invoke(
        main, ["repair", "approve", proposed.public_id, "--actor", "bob"], env=env
    )
    assert r.exit_code == 0, r.output
    done = json.loads(r.output)
    assert done["reviewer"] == "bob" and done["result"]["holds_after"] is True
    assert done["result"]["done"]["written_held"] == [before.public_id]

    [after] = deliveries_of(engine, lost.id)
    assert after.state == "held"  # written, not sent
    assert (after.public_id, bytes(after.body), after.event_id, after.event_type) == (
        before.public_id,
        bytes(before.body),
        before.event_id,
        before.event_type,
    )
    assert (after.replay, after.trace_context) == (before.replay, before.trace_context)
    assert len(deliveries_of(engine, kept.id)) == 1  # the other endpoint's, untouched
    with engine.connect() as conn:
        assert checks.open_violations(conn) == []
    assert repair_actions(engine) == [
        ("alice", "repair_proposed"),
        ("bob", "repair_applied"),
        ("bob", "repair_checked"),
    ]
    assert repairs.found(I.OPERATOR_AUDITED) == []

    # An operator releases it as any held delivery: it is then due, once.
    out = CliRunner().invoke(
        main, ["endpoints", "resume", lost.public_id, "--actor", "carol"], env=env
    )
    assert out.exit_code == 0 and "1 held deliveries released" in out.output, out.output
    assert [d.state for d in deliveries_of(engine, lost.id)] == ["pending"]


@pytest.mark.usefixtures("keys")
def test_the_intent_keeps_the_envelope_sealed_and_the_repair_writes_it_in_clear(repairs, engine):
    ep, before = repairs.lose_a_delivery()
    with engine.connect() as conn:
        intent = conn.execute(text("SELECT body, key_id FROM callback_intents")).one()
        event_key = conn.execute(text("SELECT key_id FROM events")).scalar_one()
    assert event_key is not None and intent.key_id == event_key  # sealed as its event is
    assert b"order.paid" not in bytes(intent.body)
    assert bytes(intent.body) != bytes(before.body)

    v = repairs.open_one(I.DELIVERY_PER_ENDPOINT)
    done = repairs.approve("bob", repairs.propose("alice", v))
    assert done.result is not None and done.result["holds_after"] is True
    [after] = deliveries_of(engine, ep.id)
    assert after.state == "held" and bytes(after.body) == bytes(before.body)


def test_a_missing_delivery_with_nothing_to_write_it_from_is_refused_at_the_proposal(
    repairs, engine
):
    """An intent recorded before intents kept the envelope: refused when proposed, never
    accepted and then failing on a second operator's approval."""
    repairs.lose_a_delivery()
    corrupt(engine, "UPDATE callback_intents SET body = NULL")
    v = repairs.open_one(I.DELIVERY_PER_ENDPOINT)
    with pytest.raises(BadRequest, match="before intents kept"):
        repairs.propose("alice", v)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM invariant_repairs")).scalar() == 0
        assert conn.execute(text("SELECT count(*) FROM deliveries")).scalar() == 0


def test_two_deliveries_for_one_intent_have_no_repair(repairs, client, engine):
    endpoint(engine, repairs.forward.tenant)
    repairs.decided("k1")
    corrupt(
        engine,
        "INSERT INTO deliveries (public_id, tenant_id, endpoint_id, event_id, event_type, body)"
        " SELECT public_id, tenant_id, endpoint_id, event_id, event_type, body FROM deliveries",
    )
    v = repairs.open_one(I.DELIVERY_PER_ENDPOINT)
    with pytest.raises(BadRequest, match="no safe repair"):
        repairs.propose("alice", v)
    # The console offers no repair for it either; for a missing delivery it does.
    from tests.integration.ui_support import new_token, sign_in

    sign_in(client, new_token(engine, "alice", "operator"))
    page = client.get("/ui/invariants").get_data(as_text=True)
    assert f'data-violation="{v.id}"' in page and 'data-action="propose"' not in page
    corrupt(engine, "DELETE FROM deliveries")
    missing = repairs.open_one(I.DELIVERY_PER_ENDPOINT)
    page = client.get("/ui/invariants").get_data(as_text=True)
    assert f'data-violation="{missing.id}"' in page and 'data-action="propose"' in page


def post(client, src, key: str) -> None:
    body = body_of({"type": "x", "account": "acct-1", "n": key})
    assert (
        client.post(src.path, data=body, headers=hmac_headers("s3cret", body, key)).status_code
        == 202
    )


def states(engine) -> list[tuple[str, str]]:
    with engine.connect() as conn:
        return [
            tuple(r) for r in conn.execute(text("SELECT public_id, state FROM events ORDER BY id"))
        ]


def test_a_lane_held_by_a_stale_block_is_released_by_a_second_operator(repairs, client, engine):
    src = repairs.lanes()
    post(client, src, "first")
    drain_once(repairs.rt)
    [(first, state)] = states(engine)
    assert state == "completed"
    # Its block outlived its quarantine (the trigger that removes it did not run, as on a
    # restore or a replica's apply): the lane is held by an event that is done.
    corrupt(
        engine,
        "INSERT INTO lane_blocks (tenant_id, lane, event_id)"
        " SELECT tenant_id, ordering_key, id FROM events WHERE public_id = :p",
        p=first,
    )
    post(client, src, "second")
    for _ in range(2):
        drain_once(repairs.rt)
    second = states(engine)[1][0]
    assert states(engine) == [(first, "completed"), (second, "received")]  # stuck behind it

    v = repairs.open_one(I.LANE_ORDER)
    assert v.subject == f"lane_block:{first}"
    block = one(v.rows, table="lane_blocks")
    assert (
        block["waiting"] == 1 and block["problem"] == "blocks its lane, but its event is completed"
    )
    assert one(v.rows, table="events")["public_id"] == first

    proposed = repairs.propose("alice", v)
    assert proposed.kind == "release_lane"
    assert proposed.preview["blocks"][0]["waiting"] == 1
    with pytest.raises(Forbidden):
        repairs.approve("alice", proposed)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM lane_blocks")).scalar() == 1
    done = repairs.approve("bob", proposed)
    assert done.result is not None and done.result["holds_after"] is True
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM lane_blocks")).scalar() == 0
        assert checks.open_violations(conn) == []
    assert repair_actions(engine)[-2:] == [("bob", "repair_applied"), ("bob", "repair_checked")]
    drain_once(repairs.rt)
    assert states(engine) == [(first, "completed"), (second, "completed")]


def test_a_quarantined_blocker_is_no_violation_and_an_early_run_has_no_repair(
    repairs, client, engine
):
    src = repairs.lanes()
    post(client, src, "first")
    post(client, src, "second")
    for _ in range(3):
        drain_once(repairs.rt)
    first, second = (p for p, _ in states(engine))
    corrupt(
        engine,
        "UPDATE events SET state = 'quarantined', outcome = NULL WHERE public_id = :p",
        p=first,
    )
    corrupt(
        engine,
        "INSERT INTO lane_blocks (tenant_id, lane, event_id, since)"
        " SELECT tenant_id, ordering_key, id, finished_at - interval '1 hour' FROM events"
        " WHERE public_id = :p",
        p=first,
    )
    # Rightly blocked (its event is quarantined): no stale block. The second ran behind it:
    # that is a violation, and nothing can undo a run.
    v = repairs.open_one(I.LANE_ORDER)
    assert v.subject == f"lane:{second}"
    with pytest.raises(BadRequest, match="no safe repair"):
        repairs.propose("alice", v)


# The full pass, a day at a time -------------------------------------------------------


def old_event_unaudited(engine, made_days, src, days_ago: int) -> str:
    """An event of an old day replayed with no audit row: an ``operator_audited`` break."""
    cover_open_days(engine, made_days)
    day = today(engine) - dt.timedelta(days=days_ago)
    add_day(engine, made_days, day, src)
    with engine.begin() as conn:
        _, public_id = put_event(conn, day, 7, src, "received")
    corrupt(engine, "UPDATE events SET replay = 1 WHERE public_id = :p", p=public_id)
    return public_id


class Spy:
    """The scopes each check ran with (and, when asked, a failure at the n-th slice)."""

    def __init__(self, monkeypatch, fail_at: int | None = None) -> None:
        self.scopes: list[checks.Scope] = []
        real = checks.check

        def spy(conn, invariant, scope):
            self.scopes.append(scope)
            if fail_at is not None and len(self.sliced) == fail_at:
                raise RuntimeError("the worker died mid-walk")
            return real(conn, invariant, scope)

        monkeypatch.setattr(checks, "check", spy)

    @property
    def sliced(self) -> list[checks.Scope]:
        return [s for s in self.scopes if not s.extras]


def test_the_full_pass_walks_a_day_at_a_time_and_finds_an_old_days_break(
    repairs, engine, made_days, monkeypatch
):
    repairs.decided("today")
    old = old_event_unaudited(engine, made_days, repairs.forward, days_ago=20)
    spy = Spy(monkeypatch)
    report = repairs.run(I.OPERATOR_AUDITED, full=True)
    [checked] = report.checked
    assert [f.subject for f in checked.found] == [f"event:{old}"]
    # One statement a day, each bounded to its day (the old one, then today's).
    days = [(s.since, s.until) for s in spy.sliced]
    assert days == sorted(days) and len(days) == 2
    assert all(hi - lo == 1 << ledger.DAY_SHIFT for lo, hi in days)
    assert ledger.day_of(days[0][0]) == today(engine) - dt.timedelta(days=20)
    assert len([s for s in spy.scopes if s.extras]) == 1  # bulk replays, holds, repairs: once
    with engine.connect() as conn:
        [v] = checks.open_violations(conn, "operator_audited")
    assert v.subject == f"event:{old}"
    # Fixed: the next full walk no longer sees it, and resolves it at its end.
    corrupt(engine, "UPDATE events SET replay = 0")
    assert repairs.run(I.OPERATOR_AUDITED, full=True).checked[0].resolved == 1


def test_beats_full_pass_goes_on_where_a_failed_walk_stopped(
    repairs, engine, made_days, monkeypatch
):
    repairs.decided("today")
    old = old_event_unaudited(engine, made_days, repairs.forward, days_ago=30)
    failing = Spy(monkeypatch, fail_at=2)  # the old day is checked; today's fails
    with pytest.raises(RuntimeError):
        repairs.run(I.OPERATOR_AUDITED, full=True, resume=True)
    with engine.connect() as conn:
        mark = conn.execute(
            text("SELECT full_next FROM invariant_watermarks WHERE invariant = 'operator_audited'")
        ).scalar_one()
        [v] = checks.open_violations(conn, "operator_audited")  # recorded as the day passed
    assert v.subject == f"event:{old}"
    assert mark == failing.sliced[0].until  # past the old day
    monkeypatch.undo()
    again = Spy(monkeypatch)
    repairs.run(I.OPERATOR_AUDITED, full=True, resume=True)
    assert [s.since for s in again.sliced] == [failing.sliced[1].since]  # today's alone
    with engine.connect() as conn:
        assert conn.execute(
            text(
                "SELECT full_next IS NULL AND full_started_at IS NULL FROM invariant_watermarks"
                " WHERE invariant = 'operator_audited'"
            )
        ).scalar_one()
        # The resumed walk did not see the old day again, yet kept its violation open: it
        # was seen since the walk began.
        assert [x.subject for x in checks.open_violations(conn, "operator_audited")] == [
            f"event:{old}"
        ]
    # The next walk starts from the first day again.
    third = Spy(monkeypatch)
    repairs.run(I.OPERATOR_AUDITED, full=True, resume=True)
    assert len(third.sliced) == 2


def test_a_repair_approved_after_the_break_healed_writes_nothing(repairs, engine):
    """The write is checked in its own statement: a delivery that reappeared between the
    proposal and the approval is not written twice."""
    ep, _ = repairs.lose_a_delivery()
    proposed = repairs.propose("alice", repairs.open_one(I.DELIVERY_PER_ENDPOINT))
    corrupt(
        engine,
        "INSERT INTO deliveries (public_id, tenant_id, endpoint_id, event_id, event_type, body)"
        " SELECT public_id, tenant_id, endpoint_id, event_id, event_type, body"
        " FROM callback_intents",
    )
    done = repairs.approve("bob", proposed)
    assert done.result is not None and done.result["done"]["written_held"] == []
    assert [d.state for d in deliveries_of(engine, ep.id)] == ["pending"]


def test_a_lane_blocked_again_before_the_approval_stays_blocked(repairs, client, engine):
    src = repairs.lanes()
    post(client, src, "first")
    drain_once(repairs.rt)
    [(first, _)] = states(engine)
    corrupt(
        engine,
        "INSERT INTO lane_blocks (tenant_id, lane, event_id)"
        " SELECT tenant_id, ordering_key, id FROM events WHERE public_id = :p",
        p=first,
    )
    proposed = repairs.propose("alice", repairs.open_one(I.LANE_ORDER))
    corrupt(engine, "UPDATE events SET state = 'quarantined', outcome = NULL")  # rightly now
    done = repairs.approve("bob", proposed)
    assert done.result is not None and done.result["done"]["released"] == []
    assert done.result["holds_after"] is True  # a quarantined blocker is no violation
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM lane_blocks")).scalar() == 1


def test_an_erased_payload_or_a_deleted_endpoint_is_refused_at_the_proposal(
    repairs,
    engine,
    keys,  # noqa: F811
):
    ep, _ = repairs.lose_a_delivery()
    v = repairs.open_one(I.DELIVERY_PER_ENDPOINT)
    from inbox.store.db import keystore

    corrupt(engine, "UPDATE data_keys SET destroyed_at = now()")
    with engine.connect() as conn:  # destroyed as an erasure destroys it: in the key store
        ids = list(conn.execute(text("SELECT id FROM data_keys")).scalars())
    keystore.current().destroy(ids)
    keys.clear()
    with pytest.raises(BadRequest, match="was erased"):
        repairs.propose("alice", v)
    corrupt(engine, "UPDATE callback_intents SET key_id = NULL, body = 'x'")
    corrupt(engine, "DELETE FROM endpoints WHERE id = :e", e=ep.id)
    with pytest.raises(BadRequest, match="was deleted"):
        repairs.propose("alice", v)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM invariant_repairs")).scalar() == 0


def test_a_steps_callbacks_are_two_statements_intents_and_deliveries_in_one(repairs, engine):
    from sqlalchemy import event

    from inbox.domain.callbacks import CallbackSet, Outgoing
    from inbox.store.write import intents

    forward = repairs.forward
    endpoint(engine, forward.tenant)
    endpoint(engine, forward.tenant)
    seen: list[str] = []
    with engine.begin() as conn:
        event.listen(conn, "before_cursor_execute", lambda *a, **k: seen.append(a[2]))
        msg = Outgoing("order.paid", {"n": 1}, dt.datetime.now(dt.UTC))
        cbs = CallbackSet(forward.tenant_id, forward.tenant, None, "evt_x", "s", [msg])
        ring = intents.enqueue(conn, [cbs])
    assert len(ring) == 2 and len(seen) == 2  # the endpoints, then intents and deliveries
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM callback_intents")).scalar() == 2
        assert conn.execute(text("SELECT count(*) FROM deliveries")).scalar() == 2


def test_two_walkers_take_turns_on_the_walks_row(repairs, engine):
    """A second full pass while the first holds the walk's row waits for it (then finds
    the walk done, or goes on with it), never walking beside it."""
    import threading

    repairs.decided("today")
    repairs.run(I.OPERATOR_AUDITED)  # the row exists
    done = threading.Event()
    with engine.begin() as holder:
        holder.execute(
            text(
                "SELECT 1 FROM invariant_watermarks WHERE invariant = 'operator_audited' FOR UPDATE"
            )
        )

        def walk() -> None:
            repairs.run(I.OPERATOR_AUDITED, full=True, resume=True)
            done.set()

        walker = threading.Thread(target=walk)
        walker.start()

        def waiting() -> bool:
            with engine.connect() as conn:
                return bool(
                    conn.execute(
                        text(
                            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                            " AND query LIKE '%invariant_watermarks%'"
                            " AND datname = current_database()"
                        )
                    ).scalar()
                )

        from tests.helpers import wait_for

        wait_for(waiting, 30, "the second walker to wait for the row")
        assert not done.is_set()
    walker.join(60)
    assert done.is_set()
