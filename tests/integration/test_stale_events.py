"""Stale events: an event older than the newest completed one with its business key does not
overwrite the later decision, however the two are delivered and whoever processes them."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from inbox.cli import main
from inbox.infra.config import Settings
from inbox.services.drain import drain_once
from inbox.services.runtime import Runtime
from tests.helpers import body_of, hmac_headers, sink_rows, wait_for
from tests.integration.test_api import make_token
from tests.integration.test_ui import new_token, sign_in

T1, T2 = "2026-11-30T09:00:00Z", "2026-11-30T17:30:00Z"  # the analyst decided at T2


@pytest.fixture
def wsettings(settings: Settings) -> Settings:
    return Settings(database_url=settings.database_url, batch_size=1, retry_base_seconds=0.1)


@pytest.fixture
def review_source(make_source, sink_table):
    return make_source(
        playbook="review", business_key_paths=["case"], occurred_at_path="occurred_at"
    )


def send(client, src, key: str, **payload: Any) -> str:
    body = body_of(payload)
    resp = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, key))
    assert resp.status_code == 202, resp.json
    return str(resp.json["id"])


def drain_all(engine, wsettings, deadline_s: float = 30.0) -> None:
    def drained() -> bool:
        with engine.connect() as conn:
            left = conn.execute(
                text("SELECT count(*) FROM events WHERE state IN ('received', 'processing')")
            ).scalar_one()
        if not left:
            return True
        drain_once(Runtime(wsettings, engine))
        return False

    wait_for(drained, deadline_s)


def event(engine, public_id: str) -> Any:
    with engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT e.*, (SELECT n.public_id FROM events n WHERE n.id = e.newer_event_id)"
                " AS newer FROM events e WHERE public_id = :p"
            ),
            {"p": public_id},
        ).one()


def test_an_older_event_after_a_newer_decision_is_stale_and_skips_its_steps(
    client, engine, wsettings, review_source
):
    newer = send(client, review_source, "n", case="c-1", occurred_at=T2, decision="approve")
    drain_all(engine, wsettings)
    # Yesterday's retry of the identity check lands after today's analyst decision.
    older = send(client, review_source, "o", case="c-1", occurred_at=T1, decision="close")
    drain_all(engine, wsettings)
    old, new = event(engine, older), event(engine, newer)
    assert (new.outcome, old.outcome) == ("completed", "stale")
    assert old.state == "completed" and old.newer == newer
    assert [r.event for r in sink_rows(engine)] == [newer]  # close_task never ran for it
    with engine.connect() as conn:
        steps = dict(
            conn.execute(
                text("SELECT name, result FROM steps WHERE event_id = :id"), {"id": old.id}
            ).all()
        )
    assert steps["close_task"] == {"skipped": "stale", "newer_event": newer}
    # A step not marked skip_if_stale runs, and reads ctx.newer to decide for itself.
    assert steps["note"] == {
        "newer": newer,
        "newer_at": "2026-11-30T17:30:00+00:00",
        "newer_version": None,
    }
    op = make_token(engine, "auditor", "viewer")
    shown = client.get(f"/api/v1/events/{older}", headers=op).json
    assert shown["outcome"] == "stale" and shown["newer_event"] == newer
    assert shown["occurred_at"].startswith("2026-11-30T09:00:00")
    sign_in(client, new_token(engine, "analyst", "viewer"))
    page = client.get(f"/ui/events/{older}").get_data(as_text=True)
    assert 'id="newer-event"' in page and f'href="/ui/events/{newer}"' in page


def test_the_readme_example_a_replayed_old_failure_does_not_close_over_the_approval(
    client, engine, wsettings, review_source
):
    failed = dict(case="a-17", occurred_at=T1, decision="failed", down_until_replay=True)
    evt_a = send(client, review_source, "A", **failed)
    drain_all(engine, wsettings)
    assert event(engine, evt_a).state == "quarantined"
    evt_b = send(client, review_source, "B", case="a-17", occurred_at=T2, decision="approved")
    drain_all(engine, wsettings)
    op = make_token(engine, "night-ops", "operator")
    assert client.post(f"/api/v1/events/{evt_a}/replay", headers=op).status_code == 200
    drain_all(engine, wsettings)
    a = client.get(f"/api/v1/events/{evt_a}", headers=op).json
    assert (a["outcome"], a["newer_event"], a["replay"]) == ("stale", evt_b, 1)
    assert [r.event for r in sink_rows(engine)] == [evt_b]  # the approval stands alone
    (audit,) = [x for x in a["audit"] if x["action"] == "replay"]
    assert audit["actor"] == "night-ops" and audit["detail"]["replay"] == 1
    assert audit["detail"]["error_before"] == "PermanentError"
    shown = CliRunner().invoke(main, ["events", "show", evt_a], catch_exceptions=False).output
    assert "completed (stale)" in shown and f"{evt_b} (completed first" in shown
    assert "replay 1; after 1 attempt(s) (PermanentError)" in shown


def test_in_order_both_run_and_another_business_key_is_not_compared(
    client, engine, wsettings, review_source
):
    first = send(client, review_source, "a", case="c-2", occurred_at=T1, decision="close")
    drain_all(engine, wsettings)
    second = send(client, review_source, "b", case="c-2", occurred_at=T2, decision="approve")
    other = send(client, review_source, "c", case="c-3", occurred_at=T1, decision="close")
    drain_all(engine, wsettings)
    assert {event(engine, p).outcome for p in (first, second, other)} == {"completed"}
    assert [r.event for r in sink_rows(engine)] == [first, second, other]


def test_versions_compare_as_numbers(client, engine, wsettings, make_source, sink_table):
    src = make_source(playbook="review", business_key_paths=["case"], version_path="v")
    ten = send(client, src, "10", case="c-4", v=10, decision="approve")
    drain_all(engine, wsettings)
    nine = send(client, src, "9", case="c-4", v="9", decision="close")
    drain_all(engine, wsettings)
    assert event(engine, nine).outcome == "stale" and event(engine, nine).newer == ten
    assert [r.event for r in sink_rows(engine)] == [ten]


def test_a_time_that_is_not_a_time_is_400_and_nothing_is_stored(client, engine, review_source):
    body = body_of({"case": "c-5", "occurred_at": "yesterday-ish", "decision": "close"})
    resp = client.post(review_source.path, data=body, headers=hmac_headers("s3cret", body, "x"))
    assert resp.status_code == 400 and "occurred_at" in resp.json["error"]["message"]
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM events")).scalar_one() == 0


def test_out_of_order_deliveries_released_together_never_overwrite_the_later_decision(
    client, engine, wsettings, review_source
):
    """Pairs of events about one case each, the older one slow to act: four workers
    released together behind a barrier. Exactly one order wins per case: either the
    older one acted first and the newer after it, or the newer completed and the older
    is stale with no effect. The newest decision is always the last one at the sink."""
    pairs = []
    for i in range(6):
        case = f"case-{i}"
        # Delivered newest first for half the cases, oldest first for the other half.
        older = dict(case=case, occurred_at=T1, decision="close", sleep=0.4)
        newer = dict(case=case, occurred_at=T2, decision="approve")
        order = [("n", newer), ("o", older)] if i % 2 else [("o", older), ("n", newer)]
        ids = {tag: send(client, review_source, f"{case}-{tag}", **p) for tag, p in order}
        pairs.append((case, ids["o"], ids["n"]))
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            barrier.wait()

            def drained() -> bool:
                with engine.connect() as conn:
                    left = conn.execute(
                        text("SELECT count(*) FROM events WHERE state <> 'completed'")
                    ).scalar_one()
                if not left:
                    return True
                drain_once(Runtime(wsettings, engine))
                return False

            wait_for(drained, 60)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not errors and not any(t.is_alive() for t in threads)
    rows = sink_rows(engine)
    for case, older, newer in pairs:
        effects = [r.event for r in rows if r.event in (older, newer)]
        assert effects[-1] == newer, (case, effects)  # the later decision stands
        assert effects.count(newer) == 1 and effects.count(older) <= 1, (case, effects)
        old = event(engine, older)
        if older in effects:
            assert old.outcome == "completed" and old.newer is None
        else:
            assert old.outcome == "stale" and old.newer == newer
        assert event(engine, newer).outcome == "completed"
