"""The in-memory store keeps the same rules as PostgreSQL's: one scenario, both stores.

The unit tests of the runner and drain (and users' playbook tests) trust ``inbox.testing``;
each scenario here runs against ``SqlWorkStore`` on the real database and against the fake,
through the same ``WorkStore`` calls, and asserts the same answers. A rule the fake gets
wrong fails here.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, Protocol

import pytest
from sqlalchemy import Engine, text

from inbox.domain.errors import LeaseLost
from inbox.domain.ordering import Position
from inbox.domain.records import Claim, Completion
from inbox.services.ports import WorkStore
from inbox.store.write import lanes
from inbox.store.write.work import SqlWorkStore
from inbox.testing import InMemoryStore

LEASE = 30.0


class Subject(Protocol):
    store: WorkStore[Any]
    tenant_id: int

    def add_event(self, **fields: Any) -> int: ...

    def expire(self, event_id: int) -> None: ...

    def release(self, event_id: int) -> None: ...

    def state(self, event_id: int) -> str: ...

    def public_id(self, event_id: int) -> str: ...

    def skip(self, event_id: int) -> None: ...


class Sql:
    def __init__(self, engine: Engine, make_source: Any) -> None:
        self.engine = engine
        self.source = make_source()
        self.tenant_id = int(self.source.tenant_id)
        self.store = SqlWorkStore(engine)

    def add_event(self, **fields: Any) -> int:
        params = {"max_attempts": 5, "bk": None, "ok": None, **fields}
        with self.engine.begin() as conn:
            return int(
                conn.execute(
                    text(
                        "INSERT INTO events (public_id, tenant_id, source_id, content_type, body,"
                        " body_sha256, response_status, response_body, max_attempts,"
                        " business_key_digest, ordering_key) VALUES (:p, :t, :s,"
                        " 'application/json', '{}', '\\x00', 202, '', :max_attempts, :bk, :ok)"
                        " RETURNING id"
                    ),
                    {
                        "p": f"evt_{uuid.uuid4().hex[:12]}",
                        "t": self.source.tenant_id,
                        "s": self.source.id,
                        **params,
                    },
                ).scalar_one()
            )

    def release(self, event_id: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                text("UPDATE events SET available_at = now(), held_reason = NULL WHERE id = :id"),
                {"id": event_id},
            )

    def expire(self, event_id: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                text(
                    "UPDATE events SET lease_expires_at = now() - interval '1 second'"
                    " WHERE id = :id"
                ),
                {"id": event_id},
            )

    def state(self, event_id: int) -> str:
        with self.engine.connect() as conn:
            return str(
                conn.execute(
                    text("SELECT state FROM events WHERE id = :id"), {"id": event_id}
                ).scalar_one()
            )

    def public_id(self, event_id: int) -> str:
        with self.engine.connect() as conn:
            return str(
                conn.execute(
                    text("SELECT public_id FROM events WHERE id = :id"), {"id": event_id}
                ).scalar_one()
            )

    def skip(self, event_id: int) -> None:
        with self.engine.begin() as conn:
            lanes.skip(conn, event_id, self.public_id(event_id), "op", "known bad", 100)


class Fake:
    def __init__(self) -> None:
        self.store = self.fake = InMemoryStore()
        self.tenant_id = 1

    def add_event(self, **fields: Any) -> int:
        renamed = {
            "max_attempts": fields.get("max_attempts", 5),
            "business_key_digest": fields.get("bk"),
            "ordering_key": fields.get("ok"),
        }
        return self.fake.add_event(**renamed)

    def release(self, event_id: int) -> None:
        self.fake.event(event_id).available_at = self.fake.now

    def expire(self, event_id: int) -> None:
        self.fake.event(event_id).lease_expires_at = self.fake.now - 1

    def state(self, event_id: int) -> str:
        return str(self.fake.event(event_id).state)

    def public_id(self, event_id: int) -> str:
        return self.fake.event(event_id).public_id

    def skip(self, event_id: int) -> None:
        self.fake.event(event_id).lane_skipped = True


@pytest.fixture(params=["postgresql", "in-memory"])
def subject(request: pytest.FixtureRequest) -> Iterator[Subject]:
    if request.param == "postgresql":
        yield Sql(request.getfixturevalue("engine"), request.getfixturevalue("make_source"))
    else:
        yield Fake()


def claim(s: Subject, limit: int = 10) -> list[Claim]:
    with s.store.begin() as tx:
        return s.store.claim(tx, "w", limit, LEASE)


def test_a_claimed_event_runs_once_and_completes(subject: Subject) -> None:
    event_id = subject.add_event()
    [c] = claim(subject)
    assert c.id == event_id and claim(subject) == []  # leased: nobody else gets it
    with subject.store.begin() as tx:
        ev = subject.store.load(tx, c)
        subject.store.record_steps(tx, c, {"a": {"n": 1}}, LEASE)
        subject.store.record_steps(tx, c, {"a": {"n": 2}}, LEASE)  # a recovery point stays
    assert ev.attempts == 1 and ev.steps == {}
    with subject.store.begin() as tx:
        assert subject.store.load(tx, c).steps == {"a": {"n": 1}}
        subject.store.complete(tx, c, "completed", {"ok": True}, None, None)
    assert subject.state(event_id) == "completed"
    with pytest.raises(LeaseLost), subject.store.begin() as tx:
        subject.store.complete(tx, c, "completed", {}, None, None)


def test_an_expired_lease_commits_nothing_and_is_swept_back(subject: Subject) -> None:
    event_id = subject.add_event()
    [c] = claim(subject)
    subject.expire(event_id)
    for write in (
        lambda tx: subject.store.record_steps(tx, c, {"a": 1}, LEASE),
        lambda tx: subject.store.complete(tx, c, "completed", {}, None, None),
        lambda tx: subject.store.fail(tx, c, ValueError("x"), False, 0.0),
    ):
        with pytest.raises(LeaseLost), subject.store.begin() as tx:
            write(tx)
    with subject.store.begin() as tx:
        assert subject.store.extend(tx, [c], LEASE) == 0
        assert subject.store.sweep_expired(tx) == (1, 0)
        assert subject.store.due_count(tx) == 1
    [again] = claim(subject)
    assert again.fence == c.fence + 1
    with pytest.raises(LeaseLost), subject.store.begin() as tx:
        subject.store.load(tx, c)  # the old fence


def test_failures_retry_until_attempts_run_out(subject: Subject) -> None:
    event_id = subject.add_event(max_attempts=2)
    [c] = claim(subject)
    with subject.store.begin() as tx:
        assert subject.store.fail(tx, c, ValueError("x"), False, 0.0) == "received"
    [c] = claim(subject)
    with subject.store.begin() as tx:
        assert subject.store.fail(tx, c, ValueError("x"), False, 0.0) == "quarantined"
    assert subject.state(event_id) == "quarantined"
    other = subject.add_event()
    [c] = claim(subject)
    with subject.store.begin() as tx:
        assert subject.store.fail(tx, c, ValueError("x"), True, 0.0) == "quarantined"
    assert subject.state(other) == "quarantined"


def test_a_held_event_keeps_its_attempts_and_is_not_due(subject: Subject) -> None:
    event_id = subject.add_event(max_attempts=2)
    for _ in range(3):  # held again and again: never quarantined, no attempt spent
        [c] = claim(subject)
        with subject.store.begin() as tx:
            assert subject.store.hold(tx, c, "no playbook named 'x'") == "held"
            assert subject.store.due_count(tx) == 0
        assert subject.state(event_id) == "received"
        assert claim(subject) == []
        subject.release(event_id)
    [c] = claim(subject)
    with pytest.raises(LeaseLost), subject.store.begin() as tx:
        subject.store.hold(tx, Claim(c.id, c.fence - 1), "stale")  # fenced like every write
    with subject.store.begin() as tx:  # the first failure after three holds: a retry
        assert subject.store.fail(tx, c, ValueError("x"), False, 0.0) == "received"


def test_a_delayed_retry_is_not_due_yet(subject: Subject) -> None:
    subject.add_event()
    [c] = claim(subject)
    with subject.store.begin() as tx:
        subject.store.fail(tx, c, ValueError("x"), False, 3600.0)
        assert subject.store.due_count(tx) == 0
    assert claim(subject) == []


def test_complete_many_completes_only_live_leases(subject: Subject) -> None:
    live, lost = subject.add_event(), subject.add_event()
    claims = {c.id: c for c in claim(subject)}
    subject.expire(lost)
    done = [Completion(claims[i], {"s": i}, "completed", {}, None) for i in (live, lost)]
    with subject.store.begin() as tx:
        assert subject.store.complete_many(tx, done) == {live}
        assert set(subject.store.load_many(tx, list(claims.values()))) == {lost}
    assert (subject.state(live), subject.state(lost)) == ("completed", "processing")


def test_record_many_keeps_points_of_live_leases_only(subject: Subject) -> None:
    live, lapsed, stolen = (subject.add_event() for _ in range(3))
    claims = {c.id: c for c in claim(subject)}
    subject.expire(stolen)
    with subject.store.begin() as tx:
        subject.store.sweep_expired(tx)
    [taken] = claim(subject)  # another worker's claim of it, a new fence
    assert taken.id == stolen and taken.fence != claims[stolen].fence
    subject.expire(lapsed)
    points = [(claims[i], {"a": {"n": i}}) for i in (live, lapsed, stolen)]
    with subject.store.begin() as tx:
        assert subject.store.record_many(tx, points, LEASE) == {live}
    with subject.store.begin() as tx:
        # a recovery point stays as first written
        assert subject.store.record_many(tx, [(claims[live], {"a": {"n": 0}})], LEASE) == {live}
        assert subject.store.load(tx, claims[live]).steps == {"a": {"n": live}}
        assert subject.store.load(tx, taken).steps == {}
        assert subject.store.record_many(tx, [], LEASE) == set()
    # the lapsed lease was not extended: the sweep takes the event back
    with subject.store.begin() as tx:
        assert subject.store.sweep_expired(tx) == (1, 0)
    assert subject.state(lapsed) == "received"


def test_an_effect_is_claimed_once_per_business_key(subject: Subject) -> None:
    first, _ = subject.add_event(bk=b"k" * 32), subject.add_event(bk=b"k" * 32)
    a, b = claim(subject)
    with subject.store.begin() as tx:
        assert subject.store.claim_effect(tx, a, subject.tenant_id, "pb.lock", b"k" * 32) == first
        assert subject.store.claim_effect(tx, b, subject.tenant_id, "pb.lock", b"k" * 32) == first
        assert subject.store.claim_effect(tx, b, subject.tenant_id, "pb.other", b"k" * 32) == b.id


def test_an_ordering_key_holds_back_the_later_event(subject: Subject) -> None:
    first = subject.add_event(ok=b"o")
    subject.add_event(ok=b"o")
    free = subject.add_event(ok=b"p")
    assert sorted(c.id for c in claim(subject)) == [first, free]


def test_a_quarantined_event_holds_its_lane_until_skipped(subject: Subject) -> None:
    first = subject.add_event(ok=b"o", max_attempts=1)
    second = subject.add_event(ok=b"o")
    [c] = claim(subject)
    assert c.id == first
    with subject.store.begin() as tx:  # a permanent failure: quarantined, the lane blocked
        assert subject.store.fail(tx, c, ValueError("x"), True, 0.0) == "quarantined"
    free = subject.add_event(ok=b"p")
    assert [c.id for c in claim(subject)] == [free]  # the held lane waits, another goes on
    subject.skip(first)
    assert [c.id for c in claim(subject)] == [second]
    assert subject.state(first) == "quarantined"


def test_an_older_fact_is_judged_stale_and_a_running_one_holds_the_next_back(
    subject: Subject,
) -> None:
    early, late = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
    bk = b"b" * 32
    newest = subject.add_event(bk=bk)
    [c] = claim(subject)
    with subject.store.begin() as tx:
        assert subject.store.judge(tx, c, subject.tenant_id, bk, Position(late)).newer is None
        subject.store.complete(tx, c, "completed", {}, None, None)
    older = subject.add_event(bk=bk)
    [c] = claim(subject)
    with subject.store.begin() as tx:
        judged = subject.store.judge(tx, c, subject.tenant_id, bk, Position(early))
    assert judged.newer is not None and judged.newer.public_id == subject.public_id(newest)
    assert subject.state(older) == "processing"

    other = b"o" * 32
    first, second = subject.add_event(bk=other), subject.add_event(bk=other)
    a, b = claim(subject)
    with subject.store.begin() as tx:
        assert not subject.store.judge(tx, a, subject.tenant_id, other, Position(early)).busy
        assert subject.store.judge(tx, b, subject.tenant_id, other, Position(late)).busy
    assert (subject.state(first), subject.state(second)) == ("processing", "received")
