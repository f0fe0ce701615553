"""A bulk replay's status is a ``BulkStatus`` wherever it is read, never a bare string."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from inbox.domain.approval import BulkStatus, Job
from inbox.store.reads.bulk import to_job


def _row(status: str) -> SimpleNamespace:
    values = {f: None for f in Job.__dataclass_fields__}
    values.update(
        id=1, public_id="blk_1", kind="events", filter={}, rate=10, actor="a", status=status,
        total=0, done=0, moved=0, skipped=0, created_at=datetime.now(UTC),
    )  # fmt: skip
    return SimpleNamespace(_mapping=values)


def test_a_job_read_from_its_row_has_a_bulk_status() -> None:
    job = to_job(_row("awaiting_approval"))
    assert job.status is BulkStatus.AWAITING_APPROVAL


def test_a_status_the_enum_does_not_know_is_refused() -> None:
    with pytest.raises(ValueError, match="'paused'"):
        to_job(_row("paused"))
