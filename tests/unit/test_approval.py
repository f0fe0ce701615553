"""The two-person rule, the pure part: the bulk job's states and who may approve."""

from __future__ import annotations

import pytest

from inbox.domain.approval import ALLOWED, BulkStatus, check_reviewer, initial_status, transition
from inbox.domain.errors import Forbidden, InvalidTransition
from inbox.infra.config import Settings


def test_more_than_the_threshold_waits_and_nothing_matched_is_done() -> None:
    assert initial_status(0, 100) == BulkStatus.COMPLETED
    assert initial_status(100, 100) == BulkStatus.QUEUED
    assert initial_status(101, 100) == BulkStatus.AWAITING_APPROVAL


def test_a_waiting_job_only_starts_through_approval() -> None:
    waiting = BulkStatus.AWAITING_APPROVAL
    assert {b for a, b in ALLOWED if a == waiting} == {"queued", "rejected", "cancelled"}
    with pytest.raises(InvalidTransition):
        transition(waiting, BulkStatus.RUNNING)
    with pytest.raises(InvalidTransition):
        transition(BulkStatus.REJECTED, BulkStatus.QUEUED)


def test_the_requester_may_reject_but_never_approve_their_own_job() -> None:
    with pytest.raises(Forbidden):
        check_reviewer("alice", "alice", approve=True)
    check_reviewer("alice", "bob", approve=True)
    check_reviewer("alice", "alice", approve=False)


def test_the_threshold_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INBOX_BULK_APPROVAL_MIN", raising=False)
    assert Settings.from_env().bulk_approval_min == 100
    monkeypatch.setenv("INBOX_BULK_APPROVAL_MIN", "5")
    assert Settings.from_env().bulk_approval_min == 5
