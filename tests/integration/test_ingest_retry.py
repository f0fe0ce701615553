"""The receiver's one retry loop (inbox.services.intake): a claim that PostgreSQL rolls back
as a deadlock victim is sent again, a few times in all, and stores one row.

PostgreSQL raises the deadlock here: a trigger on ``event_keys`` fails the claiming
statement with SQLSTATE 40P01 (what the deadlock detector sends) for as many of its
first calls as the test asks, counted by a sequence (a sequence is not rolled back with
the statement, so it counts every statement sent)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask import Flask
from sqlalchemy import Engine, text

from inbox.services import intake as service
from tests.helpers import body_of, hmac_headers


def _failing(engine: Engine, times: int) -> None:
    with engine.begin() as conn:
        conn.execute(text("CREATE SEQUENCE test_claims_sent"))
        conn.execute(
            text(
                f"""
                CREATE FUNCTION test_deadlock_first() RETURNS trigger AS $$
                BEGIN
                    IF nextval('test_claims_sent') <= {int(times)} THEN
                        RAISE EXCEPTION 'deadlock detected (a test''s)'
                            USING ERRCODE = 'deadlock_detected';
                    END IF;
                    RETURN NEW;
                END $$ LANGUAGE plpgsql
                """
            )
        )
        conn.execute(
            text(
                "CREATE TRIGGER test_deadlock_first BEFORE INSERT ON event_keys"
                " FOR EACH ROW EXECUTE FUNCTION test_deadlock_first()"
            )
        )


@pytest.fixture
def deadlocks(engine: Engine) -> Iterator[object]:
    """``deadlocks(n)``: the next n claiming statements are deadlock victims."""
    yield lambda n: _failing(engine, n)
    with engine.begin() as conn:
        conn.execute(text("DROP TRIGGER IF EXISTS test_deadlock_first ON event_keys"))
        conn.execute(text("DROP FUNCTION IF EXISTS test_deadlock_first()"))
        conn.execute(text("DROP SEQUENCE IF EXISTS test_claims_sent"))


def _sent(engine: Engine) -> int:
    """Claiming statements sent so far (the trigger's calls)."""
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT last_value FROM test_claims_sent")).scalar_one())


def _rows(engine: Engine) -> tuple[int, int]:
    with engine.connect() as conn:
        events = conn.execute(text("SELECT count(*) FROM events")).scalar_one()
        keys = conn.execute(text("SELECT count(*) FROM event_keys")).scalar_one()
    return int(events), int(keys)


def _post(client, src, key: str):
    body = body_of({"a": 1})
    return client.post(src.path, data=body, headers=hmac_headers("s3cret", body, key))


def test_a_claim_rolled_back_as_a_deadlock_victim_is_sent_again_and_stores_one_row(
    app: Flask, client, make_source, engine, deadlocks, bell
):
    src = make_source()
    deadlocks(1)
    resp = _post(client, src, "k1")
    assert resp.status_code == 202
    assert _sent(engine) == 2  # the victim, then the retry
    assert _rows(engine) == (1, 1)  # one event, one key: the victim left nothing
    assert app.extensions["inbox"].intake.retries == 1
    assert bell.rings == 1
    # and the sender's own retry is a duplicate of that one event
    again = _post(client, src, "k1")
    assert again.status_code == 202 and again.headers["Idempotent-Replayed"] == "true"
    assert _rows(engine) == (1, 1)


def test_there_is_one_retry_loop_and_past_it_the_answer_is_503(
    app: Flask, client, make_source, engine, deadlocks, bell
):
    """Every statement a victim: the claim is sent exactly ATTEMPTS times (a second loop
    nested below the service's, as the group commit once had, would send it ATTEMPTS
    squared times), then 503 with Retry-After, nothing stored, no ring."""
    src = make_source()
    deadlocks(100)
    resp = _post(client, src, "k1")
    assert resp.status_code == 503 and resp.headers["Retry-After"]
    assert _sent(engine) == service.ATTEMPTS
    assert _rows(engine) == (0, 0)
    assert bell.rings == 0
