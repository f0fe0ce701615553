"""The bulk replay badge: green only when the replayed items actually completed."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from inbox.domain.approval import Job
from inbox.store.reads.bulk import Outcomes
from web.ui.outcomes import verdict

JOB = Job(
    1,
    "rpl_x",
    "events",
    None,
    {},
    10,
    "alice",
    "completed",
    4,
    4,
    4,
    0,
    datetime.now(UTC),
    None,
    None,
)


@pytest.mark.parametrize(
    ("status", "outcomes", "expected"),
    [
        ("awaiting_approval", Outcomes(0, 0, 0, 0), ("active", "awaiting approval")),
        ("queued", Outcomes(0, 0, 0, 0), ("active", "queued")),
        ("running", Outcomes(1, 1, 0, 0), ("active", "running")),
        ("rejected", Outcomes(0, 0, 0, 0), ("off", "rejected")),
        ("cancelled", Outcomes(0, 0, 0, 0), ("off", "cancelled")),
        ("completed", Outcomes(2, 0, 2, 0), ("active", "moved; results pending")),
        ("completed", Outcomes(0, 4, 0, 0), ("bad", "all quarantined again")),
        ("completed", Outcomes(3, 1, 0, 0), ("mixed", "completed; 1 quarantined again")),
        ("completed", Outcomes(4, 0, 0, 0), ("ok", "completed")),
    ],
)
def test_the_badge_says_what_the_replay_achieved(status, outcomes, expected):
    assert verdict(replace(JOB, status=status), outcomes) == expected
