"""The Limits table's arithmetic (bench/common/ceiling.py): counts per event, the events/s
a commit ceiling allows, pgbench's output."""

from __future__ import annotations

import pytest

from bench.common.ceiling import Count, allowed, best_tps, limit_row, parse_tps, table


def test_counts_are_divided_by_the_events() -> None:
    c = Count(transactions=1004, commits=1000, statements=7076, events=500)
    assert c.transactions_per_event == pytest.approx(2.008)
    assert c.commits_per_event == 2.0
    assert c.trips_per_event == pytest.approx(14.152)


def test_the_ceiling_is_shared_by_the_commits_of_one_event() -> None:
    assert allowed(1000.0, 2.0) == 500.0
    assert allowed(1000.0, 0.02) == pytest.approx(50_000.0)
    assert allowed(1000.0, 0.0) is None  # a path that commits nothing is not bound by it


def test_a_row_states_todays_figure_as_a_share_of_what_is_allowed() -> None:
    row = limit_row("drain", Count(1007, 1000, 3500, 500), 1200.0, 241.0)
    assert row["commits_per_event"] == 2.0
    assert row["round_trips_per_event"] == 7.0
    assert row["allowed_events_per_s"] == 600
    assert row["today_of_allowed"] == pytest.approx(241 / 600, abs=1e-3)
    unknown = limit_row("callback", Count(5, 5, 5, 5), 1200.0, None)
    assert unknown["today_of_allowed"] is None
    shown = table([row, unknown])
    assert "| drain | 2.00 | 2.01 | 7.00 | 1,200 | 600 | 241 | 0.40 |" in shown
    assert "| callback | 1.00 | 1.00 | 1.00 | 1,200 | 1,200 | - | - |" in shown


def test_the_best_pgbench_level_is_the_ceiling() -> None:
    assert best_tps({1: 270.0, 8: 1450.5, 32: 1300.0}) == (8, 1450.5)


def test_pgbench_tps_is_read_without_the_connections_start() -> None:
    out = (
        "number of transactions actually processed: 2700\n"
        "latency average = 3.704 ms\n"
        "initial connection time = 4.203 ms\n"
        "tps = 269.631915 (without initial connection time)\n"
    )
    assert parse_tps(out) == pytest.approx(269.631915)
    with pytest.raises(RuntimeError, match="no tps"):
        parse_tps("pgbench: error: connection refused")
