"""The self-audit's pure rules: names, the lease bound, which repairs exist, the
two-operator rule, and beat's schedule of passes."""

from __future__ import annotations

import pytest

from inbox.domain.errors import BadRequest, Forbidden
from inbox.domain.invariants import (
    FULL_SECONDS,
    INCREMENTAL_SECONDS,
    LANE_RELEASING_STATES,
    MEANING,
    NO_DELIVERY,
    OWED_DELIVERY_STATES,
    REPAIRS,
    STALE_BLOCK,
    Invariant,
    RepairKind,
    check_approver,
    lease_bound_seconds,
    parse,
    repair_available,
    repair_of,
)
from inbox.domain.states import DELIVERY_STATES, EventState


def test_every_invariant_is_named_and_explained_in_the_docs():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs/explanation/invariants.md").read_text()
    for inv in Invariant:
        assert MEANING[inv]
        assert f"| `{inv.value}` |" in doc, inv


def test_names_parse_and_an_unknown_one_is_refused():
    assert parse([]) == list(Invariant)
    assert parse(["lane_order", "lane_order", "event_state"]) == [
        Invariant.LANE_ORDER,
        Invariant.EVENT_STATE,
    ]
    with pytest.raises(BadRequest, match="unknown invariant nope"):
        parse(["nope"])


def test_the_lease_bound_is_three_sweeps_and_never_below_fifteen_seconds():
    assert lease_bound_seconds(30) == 90
    assert lease_bound_seconds(1) == 15


def test_every_delivery_state_and_held_owe_a_callback():
    assert set(DELIVERY_STATES) | {"held"} == set(OWED_DELIVERY_STATES)
    assert len(OWED_DELIVERY_STATES) == len(set(OWED_DELIVERY_STATES))


def test_a_quarantined_event_holds_its_lane():
    assert EventState.QUARANTINED not in LANE_RELEASING_STATES
    assert EventState.RECEIVED not in LANE_RELEASING_STATES
    assert EventState.PROCESSING not in LANE_RELEASING_STATES


def test_no_repair_for_what_could_double_an_effect():
    assert set(REPAIRS) == {
        Invariant.LEASE_RECLAIMED,
        Invariant.DELIVERY_PER_ENDPOINT,
        Invariant.LANE_ORDER,
    }
    for inv in (Invariant.STEP_ONCE, Invariant.WEBHOOK_ID_ONE_BODY, Invariant.EVENT_STATE):
        assert inv not in REPAIRS
        assert repair_of(inv.value, "event:evt_x", []) is None
    assert repair_available(RepairKind.RECLAIM_LEASES)
    assert repair_available(RepairKind.WRITE_HELD_DELIVERY)  # intents keep the envelope
    assert repair_of("lease_reclaimed", "event:evt_x", []) is RepairKind.RECLAIM_LEASES


def test_only_a_delivery_that_is_missing_is_written_and_only_a_stale_block_released():
    missing = [{"table": "callback_intents", "problem": NO_DELIVERY}]
    doubled = [{"table": "callback_intents", "problem": "2 deliveries for one intent"}]
    assert repair_of("delivery_per_endpoint", "intent:m", missing) is RepairKind.WRITE_HELD_DELIVERY
    assert repair_of("delivery_per_endpoint", "intent:m", doubled) is None  # could send twice
    assert repair_of("lane_order", STALE_BLOCK + "evt_x", []) is RepairKind.RELEASE_LANE
    assert repair_of("lane_order", "lane:evt_x", []) is None  # a run cannot be undone


def test_a_repair_needs_a_second_operator():
    check_approver("alice", "bob")
    with pytest.raises(Forbidden):
        check_approver("alice", "alice")


def test_beat_sends_an_incremental_pass_every_minute_and_a_full_one_every_six_hours():
    from inbox.infra import broker
    from workers.app import app

    entries = [e for e in app.conf.beat_schedule.values() if e["task"] == broker.AUDIT]
    by_kind = {bool(e.get("kwargs", {}).get("full")): e["schedule"] for e in entries}
    assert by_kind == {False: INCREMENTAL_SECONDS, True: FULL_SECONDS}
    assert (INCREMENTAL_SECONDS, FULL_SECONDS) == (60.0, 6 * 3600.0)


def test_the_next_pass_starts_a_sixth_of_an_interval_before_the_highest_id_seen():
    from inbox.domain import ledger
    from inbox.store.write.audit import next_since

    assert next_since(0, 1000) == 1000  # after a first pass: where it ended
    assert next_since(400, 1000) == 900  # 600 new ids: the last 100 are read again
    assert next_since(1000, 1000) == 1000  # nothing new
    day = ledger.bounds(ledger.EPOCH.replace(year=2026))[0]
    # Across a ledger day the ids do not continue: the new day's are read from its highest.
    assert next_since(day - 5, day + 50) == day + 50
