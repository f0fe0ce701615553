"""Pruning against real PostgreSQL: exactly which keys, bodies and attempts go, and which stay."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from inbox.cli import main
from inbox.domain.errors import BadRequest
from inbox.domain.idempotency import key_digest
from inbox.infra.config import Settings
from inbox.services.drain import drain_once
from inbox.services.runtime import Runtime
from inbox.store.write.retention import prune_once
from tests.helpers import EVENTS, body_of, hmac_headers, keyed_insert

NOW = datetime(2031, 6, 1, 12, 0, tzinfo=UTC)
H = timedelta(hours=1)
D = timedelta(days=1)

_INSERT = text(
    keyed_insert(
        """
    INSERT INTO events (public_id, tenant_id, source_id, key_digest,
                        content_type, body, body_sha256, headers, response_status,
                        response_body, state, received_at, finished_at, decision)
    VALUES (:p, :t, :s, :kd, 'application/json', :body, :sha, '{"x-a": "1"}', 202,
            '', :state, :received, :finished, CAST(:decision AS jsonb))
    """
    )
)


@pytest.fixture
def psettings(settings: Settings) -> Settings:
    return Settings(database_url=settings.database_url, key_ttl_hours=24)


def add(engine, src, public_id, state, age, key=True, window_hours=24, now=NOW):
    """An event of ``src`` received ``age`` before ``now``, its key expiring after the window."""
    received = now - age
    body = f'{{"id":"{public_id}"}}'.encode()
    with engine.begin() as conn:
        return conn.execute(
            _INSERT,
            {
                "p": public_id,
                "t": src.tenant_id,
                "s": src.id,
                "kd": key_digest(src.tenant_id, src.id, public_id) if key else None,
                "ke": received + timedelta(hours=window_hours) if key else None,
                "body": body,
                "sha": hashlib.sha256(body).digest(),
                "state": state,
                "received": received,
                "finished": received if state in ("completed", "quarantined") else None,
                "decision": '{"decision": "recorded"}' if state == "completed" else None,
            },
        ).scalar_one()


def gone(engine):
    """(public ids without a key, public ids without a body)."""
    with engine.connect() as conn:
        rows = list(conn.execute(text("SELECT public_id, key_digest, body FROM events")))
    return (
        {r.public_id for r in rows if r.key_digest is None},
        {r.public_id for r in rows if r.body is None},
    )


def test_exactly_the_expired_keys_and_old_bodies_of_finished_events_go(
    make_source, engine, psettings
):
    src = make_source()  # hmac: key window 24 h (global), retention 30 days
    add(engine, src, "old-received", "received", 400 * D)
    add(engine, src, "old-processing", "processing", 400 * D)
    add(engine, src, "fresh-done", "completed", 2 * H)
    add(engine, src, "just-inside", "completed", 24 * H - timedelta(seconds=1))
    add(engine, src, "edge-key", "completed", 24 * H)
    add(engine, src, "expired-done", "completed", 25 * H)
    add(engine, src, "done-29d", "completed", 29 * D)
    add(engine, src, "edge-body", "completed", 30 * D)
    dead = add(engine, src, "dead-31d", "quarantined", 31 * D)
    add(engine, src, "unkeyed-40d", "completed", 40 * D, key=False)
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO steps (event_id, name, result, attempt) VALUES (:e, 'r', '{}', 1)"),
            {"e": dead},
        )
        before = {
            r.public_id: (bytes(r.body_sha256), r.headers, r.decision)
            for r in conn.execute(text("SELECT * FROM events"))
        }

    result = prune_once(engine, psettings, now=NOW)

    keys_gone, bodies_gone = gone(engine)
    removed_keys = {"edge-key", "expired-done", "done-29d", "edge-body", "dead-31d"}
    assert keys_gone == removed_keys | {"unkeyed-40d"}
    assert bodies_gone == {"edge-body", "dead-31d", "unkeyed-40d"}
    assert (result.keys_removed, result.bodies_removed, result.attempts_folded) == (5, 3, 0)
    assert result.refused_sources == []
    with engine.connect() as conn:
        after = {
            r.public_id: (bytes(r.body_sha256), r.headers, r.decision)
            for r in conn.execute(text("SELECT * FROM events"))
        }
        assert conn.execute(text("SELECT count(*) FROM steps")).scalar_one() == 1
        expiry = conn.execute(
            text(
                "SELECT count(*) FROM events e WHERE key_digest IS NULL"
                " AND NOT EXISTS (SELECT FROM event_keys k WHERE k.event_id = e.id)"
            )
        ).scalar_one()
    assert after == before  # the ledger stays: hash, headers, decision
    assert expiry == 6
    again = prune_once(engine, psettings, now=NOW)
    assert (again.keys_removed, again.bodies_removed) == (0, 0)


def test_each_source_keeps_bodies_for_its_own_retention_days(make_source, engine, psettings):
    week, default = make_source(retention_days=7), make_source()
    for src, prefix in ((week, "w"), (default, "d")):
        add(engine, src, f"{prefix}-6d", "completed", 6 * D)
        add(engine, src, f"{prefix}-8d", "quarantined", 8 * D)
        add(engine, src, f"{prefix}-8d-pending", "received", 8 * D)
    result = prune_once(engine, psettings, now=NOW)
    assert gone(engine)[1] == {"w-8d"}
    assert result.bodies_removed == 1


def shorten_key_window(engine, src, hours: int) -> None:
    """A source saved before the check existed, with a window too short for its scheme."""
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE sources SET options = options || CAST(:o AS jsonb) WHERE id = :id"),
            {"o": f'{{"key_ttl_hours": {hours}}}', "id": src.id},
        )


def test_a_key_window_shorter_than_the_providers_retries_is_refused(make_source, engine, psettings):
    with pytest.raises(BadRequest):  # refused when the source is created...
        make_source("stripe", key_ttl_hours=24, tenant="acme", name="refused")
    short_stripe = make_source("stripe", key_ttl_hours=72, tenant="acme", name="pay-short")
    shorten_key_window(engine, short_stripe, 24)  # ...and by prune for an older source
    long_stripe = make_source("stripe", key_ttl_hours=72, tenant="acme", name="pay-long")
    # no window of its own: the global 24 h stretched to Svix's 28 h schedule
    svix = make_source("standard", ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",), name="svix")
    for src in (short_stripe, long_stripe, svix):
        add(engine, src, f"{src.name}-done", "completed", 40 * D)
        add(engine, src, f"{src.name}-recent", "completed", 4 * D)
        add(engine, src, f"{src.name}-today", "completed", 20 * H)
    result = prune_once(engine, psettings, now=NOW)

    assert [r.split(":")[0] for r in result.refused_sources] == ["acme/pay-short"]
    assert "stripe" in result.refused_sources[0] and "72 h" in result.refused_sources[0]
    keys_gone, bodies_gone = gone(engine)
    assert keys_gone == {"pay-long-done", "pay-long-recent", "svix-done", "svix-recent"}
    # bodies follow the retention whatever the key window
    assert bodies_gone == {"pay-short-done", "pay-long-done", "svix-done"}
    assert (result.keys_removed, result.bodies_removed) == (4, 3)


def test_no_key_goes_before_the_providers_horizon_even_if_its_stored_expiry_passed(
    make_source, engine, psettings
):
    stripe = make_source("stripe", key_ttl_hours=72)
    add(engine, stripe, "stored-under-24h-60h-ago", "completed", 60 * H, window_hours=24)
    add(engine, stripe, "stored-under-24h-73h-ago", "completed", 73 * H, window_hours=24)
    result = prune_once(engine, psettings, now=NOW)
    assert gone(engine)[0] == {"stored-under-24h-73h-ago"}
    assert result.keys_removed == 1


def test_batches_cover_everything_and_a_dry_run_changes_nothing(make_source, engine, psettings):
    src = make_source()
    for i in range(25):
        add(engine, src, f"old-{i}", "completed", 31 * D)
    add(engine, src, "pending", "received", 31 * D)
    dry = prune_once(engine, psettings, now=NOW, dry_run=True, batch_size=4)
    assert (dry.keys_removed, dry.bodies_removed, dry.dry_run) == (25, 25, True)
    assert gone(engine) == (set(), set())
    real = prune_once(engine, psettings, now=NOW, batch_size=4)
    assert (real.keys_removed, real.bodies_removed) == (25, 25)
    expected = {f"old-{i}" for i in range(25)}
    assert gone(engine) == (expected, expected)


def send(client, src, payload, key):
    body = body_of(payload)
    return client.post(src.path, data=body, headers=hmac_headers("s3cret", body, key))


def test_after_pruning_a_reused_key_is_a_new_event_through_the_app(
    client, make_source, engine, settings
):
    src = make_source()
    first = send(client, src, {"n": 1}, "order-1")
    assert first.status_code == 202
    assert send(client, src, {"n": 1}, "order-1").headers.get("Idempotent-Replayed") == "true"
    assert drain_once(Runtime(settings, engine)).claimed == 1  # order-1 completes
    assert send(client, src, {"n": 2}, "order-2").status_code == 202  # stays received
    with engine.begin() as conn:  # both keys' windows have passed
        conn.execute(text("UPDATE event_keys SET expires_at = now() - interval '1 second'"))
        conn.execute(text("UPDATE events SET received_at = now() - interval '25 hours'"))

    result = prune_once(engine, settings)  # the database clock
    assert result.keys_removed == 1

    again = send(client, src, {"n": 1}, "order-1")
    assert again.status_code == 202 and "Idempotent-Replayed" not in again.headers
    assert again.get_json()["id"] != first.get_json()["id"]
    pending = send(client, src, {"n": 2}, "order-2")
    assert pending.headers.get("Idempotent-Replayed") == "true"  # an unfinished event's key
    with engine.connect() as conn:
        rows = list(conn.execute(text(EVENTS + " ORDER BY e.id")))
    digest = key_digest(src.tenant_id, src.id, "order-1")
    assert [(r.public_id, r.key_digest is not None) for r in rows] == [
        (first.get_json()["id"], False),
        (rows[1].public_id, True),
        (again.get_json()["id"], True),
    ]
    assert bytes(rows[2].key_digest) == digest
    assert [r.duplicate_count for r in rows] == [1, 1, 0]


def _delivery(conn, tenant_id, endpoint_id, event_id, public_id, state, finished, attempts):
    delivery = conn.execute(
        text(
            "INSERT INTO deliveries (public_id, tenant_id, endpoint_id, event_id, event_type,"
            " body, state, attempts, finished_at)"
            " VALUES (:p, :t, :ep, :ev, 'x', '{}', :state, :n, :fin) RETURNING id"
        ),
        {
            "p": public_id,
            "t": tenant_id,
            "ep": endpoint_id,
            "ev": event_id,
            "state": state,
            "n": attempts,
            "fin": finished,
        },
    ).scalar_one()
    for i in range(attempts):
        conn.execute(
            text(
                "INSERT INTO delivery_attempts (delivery_id, at, status, latency_ms)"
                " VALUES (:d, :at, 500, 12)"
            ),
            {"d": delivery, "at": (finished or NOW - 60 * D) - timedelta(minutes=attempts - i)},
        )


def test_attempts_of_old_delivered_callbacks_are_folded_into_their_counts(
    make_source, engine, psettings
):
    src, week = make_source(), make_source(retention_days=7)
    ev = add(engine, src, "e", "completed", 2 * D)
    ev7 = add(engine, week, "e7", "completed", 2 * D)
    with engine.begin() as conn:
        ep = conn.execute(
            text(
                "INSERT INTO endpoints (public_id, tenant_id, url)"
                " VALUES ('ep_1', :t, 'https://example.com/h') RETURNING id"
            ),
            {"t": src.tenant_id},
        ).scalar_one()
        t = src.tenant_id
        _delivery(conn, t, ep, ev, "old-delivered", "delivered", NOW - 31 * D, 3)
        _delivery(conn, t, ep, ev, "recent-delivered", "delivered", NOW - 8 * D, 2)
        _delivery(conn, t, ep, ev, "old-failed", "failed", NOW - 60 * D, 4)
        _delivery(conn, t, ep, ev, "old-pending", "pending", None, 1)
        _delivery(conn, t, ep, None, "no-event", "delivered", NOW - 31 * D, 1)
        _delivery(conn, t, ep, ev7, "week-delivered", "delivered", NOW - 8 * D, 2)

    result = prune_once(engine, psettings, now=NOW)

    assert result.attempts_folded == 3 + 1 + 2
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT d.public_id, d.attempts, count(a.id) AS kept FROM deliveries d"
                " LEFT JOIN delivery_attempts a ON a.delivery_id = d.id GROUP BY d.id"
            )
        )
        left = {r.public_id: (r.attempts, r.kept) for r in rows}
    assert left == {
        "old-delivered": (3, 0),
        "recent-delivered": (2, 2),
        "old-failed": (4, 4),
        "old-pending": (1, 1),
        "no-event": (1, 0),
        "week-delivered": (2, 0),
    }


def test_the_prune_command_reports_and_fails_on_a_refusal(make_source, engine, monkeypatch):
    monkeypatch.setenv("INBOX_KEY_TTL_HOURS", "24")
    src = make_source(tenant="acme", name="hooks")
    now = datetime.now(UTC)
    add(engine, src, "old", "completed", 40 * D, now=now)
    runner = CliRunner()

    dry = runner.invoke(main, ["prune", "--dry-run"], catch_exceptions=False)
    assert dry.exit_code == 0, dry.output
    assert "keys              would remove 1" in dry.output
    assert gone(engine) == (set(), set())

    done = runner.invoke(main, ["prune"], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert "bodies            removed 1" in done.output
    assert gone(engine) == ({"old"}, {"old"})

    stripe = make_source("stripe", tenant="acme", name="stripe", key_ttl_hours=72)
    shorten_key_window(engine, stripe, 24)
    refused = runner.invoke(main, ["prune"], catch_exceptions=False)
    assert refused.exit_code == 1
    assert "refused           acme/stripe: key window 24 h" in refused.stderr
