"""The ledger's day partitions against real PostgreSQL: made ahead, rows moved out of
DEFAULT, whole days dropped with their children, and each day that stays says why."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Iterable

from click.testing import CliRunner
from sqlalchemy import Engine, text

from inbox.cli import main
from inbox.domain import ledger
from inbox.infra.config import Settings
from inbox.services.drain import drain_once
from inbox.services.runtime import Runtime
from inbox.store.reads import ledger_reads
from inbox.store.schema import partitions
from inbox.store.schema.tables import PARTITIONED
from inbox.store.write.retention import prune_once
from tests.helpers import EVENTS, body_of, hmac_headers
from tests.integration.ledger_support import put_delivery, put_event


def today(engine: Engine) -> dt.date:
    with engine.connect() as conn:
        return partitions.today(conn)


def exists(engine: Engine, name: str) -> bool:
    with engine.connect() as conn:
        return bool(conn.execute(text("SELECT to_regclass(:n) IS NOT NULL"), {"n": name}).scalar())


def unmade(engine: Engine, offsets: Iterable[int]) -> list[dt.date]:
    """The days ``offsets`` from today that have no partition yet."""
    start = today(engine)
    with engine.connect() as conn:
        had = set(partitions.days(conn))
    return [d for d in (start + dt.timedelta(days=n) for n in offsets) if d not in had]


def cover_open_days(engine: Engine, made_days: list[dt.date]) -> None:
    """A partition for yesterday, today and tomorrow, each that has none: the days a claim
    may look at (within an hour after midnight the floor is yesterday's, and a database
    made today has no partition for it: its rows would be in DEFAULT, rightly scanned)."""
    missing = unmade(engine, (-1, 0, 1))
    made_days += missing
    with engine.begin() as conn:
        for day in missing:
            partitions.make_day(conn, day)


def add_day(engine, made_days, day, src, n=1, event_state="completed", delivery_state="delivered"):
    """``day``'s partitions, with event ``n`` of that day (a step, a failed attempt, a
    conflict record) and its delivery (with an attempt); the event's id."""
    made_days.append(day)
    with engine.begin() as conn:
        partitions.make_day(conn, day)
        event_id, _ = put_event(conn, day, n, src, event_state)
        conn.execute(
            text(
                "INSERT INTO idempotency_conflicts (event_id, other_body_sha256) VALUES (:e, 'x')"
            ),
            {"e": event_id},
        )
        put_delivery(conn, day, n, src, event_id, delivery_state)
    return event_id


def test_the_partitions_ahead_are_made_once(engine, made_days):
    # The migration made its day and the 7 after it; the suite may have started yesterday.
    made_days += unmade(engine, range(10))
    assert len(made_days) >= 2
    made = partitions.ensure_ahead(engine, ahead_days=9)
    assert sorted(made.created) == sorted(
        ledger.partition_name(t, d) for t in PARTITIONED for d in made_days
    )
    assert partitions.ensure_ahead(engine, ahead_days=9).created == []


def test_rows_in_the_default_partition_move_into_their_day(engine, make_source, made_days):
    src = make_source()
    day = today(engine) + dt.timedelta(days=30)  # no partition yet: beat was down
    made_days.append(day)
    event_id = ledger.make_id(day, 7)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO events (id, public_id, tenant_id, source_id, content_type,"
                " body_sha256, response_status, response_body)"
                " VALUES (:id, 'evt_x', :t, :s, 'a/b', '\\x00', 202, '')"
            ),
            {"id": event_id, "t": src.tenant_id, "s": src.id},
        )
        conn.execute(
            text("INSERT INTO steps (event_id, name, attempt) VALUES (:e, 'r', 1)"),
            {"e": event_id},
        )
    with engine.begin() as conn:
        made = partitions.make_day(conn, day)
    assert made.moved == 2
    assert ledger.partition_name("events", day) in made.created
    with engine.connect() as conn:
        where = {"e": event_id}
        for table, key in (("events", "id"), ("steps", "event_id")):
            name = ledger.partition_name(table, day)
            sql = f"SELECT count(*) FROM {name} WHERE {key} = :e"
            assert conn.execute(text(sql), where).scalar() == 1
            sql = f"SELECT count(*) FROM {table}_default"
            assert conn.execute(text(sql)).scalar() == 0
        # the moved day is a proper partition: its guard trigger and checks came along
        guarded = conn.execute(
            text(
                "SELECT count(*) FROM pg_trigger"
                " WHERE tgrelid = CAST(:n AS regclass) AND tgname = 'events_state_guard'"
            ),
            {"n": ledger.partition_name("events", day)},
        ).scalar()
        assert guarded == 1


def test_a_finished_old_day_is_dropped_with_its_children(engine, make_source, made_days):
    src = make_source()
    old = today(engine) - dt.timedelta(days=400)
    event_id = add_day(engine, made_days, old, src)
    with engine.begin() as conn:  # a business effect outlives its event's day
        conn.execute(
            text(
                "INSERT INTO effects (tenant_id, name, business_key_digest, event_id)"
                " VALUES (:t, 'charge', 'bk', :e)"
            ),
            {"t": src.tenant_id, "e": event_id},
        )
    result = prune_once(engine, Settings())
    assert result.days_dropped == [str(old)]
    for t in PARTITIONED:
        assert not exists(engine, ledger.partition_name(t, old)), t
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM idempotency_conflicts")).scalar() == 0
        assert conn.execute(text("SELECT count(*) FROM effects")).scalar() == 1


def test_a_day_with_unfinished_work_is_kept_and_says_why(engine, make_source, made_days):
    src = make_source(tenant="acme", name="hooks")
    base = today(engine) - dt.timedelta(days=400)
    received, pending, done = (base - dt.timedelta(days=n) for n in (0, 1, 2))
    add_day(engine, made_days, received, src, event_state="received")
    add_day(engine, made_days, pending, src, delivery_state="pending")
    add_day(engine, made_days, done, src)

    dry = CliRunner().invoke(main, ["prune", "--dry-run"], catch_exceptions=False)
    assert dry.exit_code == 0, dry.output
    assert f"ledger days       would drop {done}" in dry.output
    assert exists(engine, ledger.partition_name("events", done))  # a dry run drops nothing
    listed = CliRunner().invoke(main, ["partitions"], catch_exceptions=False)
    assert listed.exit_code == 0, listed.output
    lines = {line.split()[0]: line for line in listed.output.splitlines()[1:]}
    assert lines[str(received)].endswith("kept: 1 unfinished event(s)")
    assert lines[str(pending)].endswith("kept: 1 unfinished deliveries")
    assert lines[str(done)].endswith("dropped by the next prune")
    assert lines[str(today(engine))].endswith("inside the window")

    result = prune_once(engine, Settings())
    assert result.days_dropped == [str(done)]
    assert f"{received}: 1 unfinished event(s)" in result.days_kept
    assert f"{pending}: 1 unfinished deliveries" in result.days_kept
    assert exists(engine, ledger.partition_name("events", received))
    assert exists(engine, ledger.partition_name("delivery_attempts", pending))

    again = CliRunner().invoke(main, ["prune"], catch_exceptions=False)
    assert f"day kept          {received}: 1 unfinished event(s)" in again.output


def test_a_day_a_live_key_points_into_is_kept(engine, make_source, made_days):
    src = make_source()
    old = today(engine) - dt.timedelta(days=400)
    event_id = add_day(engine, made_days, old, src)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO event_keys (tenant_id, source_id, key_digest, event_id, public_id,"
                " expires_at, body_sha256, response_status, response_body)"
                " VALUES (:t, :s, 'k', :e, 'evt_x', now() + interval '1 day', 'x', 202, '')"
            ),
            {"t": src.tenant_id, "s": src.id, "e": event_id},
        )
    result = prune_once(engine, Settings())
    assert result.days_dropped == []
    assert result.days_kept == [f"{old}: 1 live dedup key(s) point into it"]


def test_a_day_inside_the_ledger_window_is_kept(engine, make_source, made_days):
    src = make_source("stripe", key_ttl_hours=72)  # keys live 3 days
    recent = today(engine) - dt.timedelta(days=3)
    add_day(engine, made_days, recent, src)
    # A window of one day would drop it; the keys' 72 h stretch the window to 4 days.
    result = prune_once(engine, Settings(ledger_retention_days=1))
    assert result.days_dropped == [] and result.days_kept == []
    assert result.ledger_window_note is not None and "72 h" in result.ledger_window_note
    assert exists(engine, ledger.partition_name("events", recent))


def test_expired_keys_go_and_their_counts_stay_on_the_event(client, make_source, engine, settings):
    src = make_source()
    body = body_of({"n": 1})
    for _ in range(3):
        resp = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, "k-1"))
        assert resp.status_code == 202
    assert drain_once(Runtime(settings, engine)).claimed == 1
    with engine.begin() as conn:
        assert conn.execute(text("SELECT duplicate_count FROM event_keys")).scalar() == 2
        assert conn.execute(text("SELECT duplicate_count FROM events")).scalar() == 0
        conn.execute(text("UPDATE event_keys SET expires_at = now() - interval '1 second'"))
        conn.execute(text("UPDATE events SET received_at = now() - interval '25 hours'"))
    assert prune_once(engine, settings).keys_removed == 1
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM event_keys")).scalar() == 0
        [row] = conn.execute(text(EVENTS)).fetchall()
    assert row.key_digest is None and row.duplicate_count == 2
    assert row.first_duplicate_at is not None and row.last_duplicate_at >= row.first_duplicate_at


def _plan(engine: Engine, sql: str, params: dict[str, object]) -> str:
    with engine.connect() as conn:
        rows = conn.execute(text("EXPLAIN (COSTS OFF) " + sql), params)
        return "\n".join(r[0] for r in rows)


def test_lookups_by_id_and_public_id_read_only_their_days(engine):
    # A day whose neighbours have partitions too (made a week ahead), so DEFAULT, which
    # could hold rows of a day without one, is not read either.
    day = today(engine) + dt.timedelta(days=3)
    public_id = ledger.public_id("evt_", day, hashlib.sha256(b"x").hexdigest()[:16])
    by_public = _plan(
        engine,
        f"SELECT id FROM events WHERE {ledger_reads.by_public_id('events')}",
        ledger_reads.bounds_params(public_id),
    )
    scanned = set(re.findall(r"\bevents_(?:p\d{8}|default)\b", by_public))
    # its day and the day either side (clocks around midnight), nothing else
    near = [day + dt.timedelta(days=n) for n in (-1, 0, 1)]
    assert scanned == {ledger.partition_name("events", d) for d in near}, by_public
    by_id = _plan(engine, "SELECT * FROM steps WHERE event_id = :e", {"e": ledger.make_id(day, 1)})
    assert set(re.findall(r"\bsteps_(?:p\d{8}|default)\b", by_id)) == {
        ledger.partition_name("steps", day)
    }, by_id
