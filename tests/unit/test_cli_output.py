"""The CLI's output helpers: aligned tables with a header row, ISO-8601 UTC times, JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import click
from click.testing import CliRunner

from inbox.cli.output import emit_json, plain, table, when


def _run(fn) -> str:
    @click.command()
    def cmd() -> None:
        fn()

    return CliRunner().invoke(cmd, []).output


def test_a_table_has_a_header_row_and_aligned_columns() -> None:
    out = _run(lambda: table(["event", "state"], [("evt_1", "completed"), ("evt_22222", None)]))
    lines = out.splitlines()
    assert lines[0].split() == ["EVENT", "STATE"]
    # every value of the second column starts where its header does
    col = lines[0].index("STATE")
    assert [line[col:].split()[0] for line in lines[1:]] == ["completed", "-"]
    assert lines[1].startswith("evt_1 ") and lines[2].startswith("evt_22222")


def test_an_empty_table_says_so_under_its_header() -> None:
    assert _run(lambda: table(["a"], [])).splitlines() == ["A", "(none)"]


def test_times_are_iso_8601_in_utc() -> None:
    plus2 = timezone(timedelta(hours=2))
    assert when(datetime(2026, 12, 1, 13, 0, 5, tzinfo=plus2)) == "2026-12-01T11:00:05Z"
    assert when(None) == "-"
    out = _run(lambda: table(["at"], [(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),)]))
    assert out.splitlines()[1] == "2026-01-02T03:04:05Z"


def test_json_carries_times_bytes_and_tuples() -> None:
    value = {"at": datetime(2026, 1, 2, tzinfo=UTC), "digest": b"\x01\xff", "ids": (1, 2)}
    assert plain(value) == {"at": "2026-01-02T00:00:00Z", "digest": "01ff", "ids": [1, 2]}
    assert json.loads(_run(lambda: emit_json(value)))["digest"] == "01ff"
