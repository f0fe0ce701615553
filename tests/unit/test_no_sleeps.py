"""Tests wait on conditions, never for a fixed time.

A fixed sleep is either too short on a loaded machine (a flaky test) or longer than it
needs to be everywhere else (a slow suite). Wait with ``tests.helpers.wait_for`` (or
``eventually``) on the thing that shows the state has been reached; where time itself is
the subject, give the code a clock (``tests.helpers.Clock``) and move it.
"""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent

# The one place a test waits (its polling interval), and the stand-ins for outside
# systems whose slowness is what they play: a slow or dribbling HTTP server, a playbook
# step that takes a while, a broker that is down for a while, a process being started.
ALLOWED = {
    "helpers.py",
    "sink.py",
    "sink_playbooks.py",
    "brokers.py",
    "procs.py",
    "unit/outbound/local_server.py",
    "unit/test_no_sleeps.py",  # this check's own examples
}

# time.sleep(...), a bare sleep(...) after `from time import sleep`, asyncio.sleep(...),
# playwright's wait_for_timeout(...); not pg_sleep(...), which a test uses to hold a query.
FIXED_WAIT = re.compile(r"(?<![\w.])(?:(?:time|asyncio)\.)?sleep\(|\.wait_for_timeout\(")


def fixed_waits(text: str) -> list[int]:
    return [n for n, line in enumerate(text.splitlines(), 1) if FIXED_WAIT.search(line)]


def test_no_fixed_sleeps_in_tests() -> None:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        name = path.relative_to(TESTS).as_posix()
        if name in ALLOWED:
            continue
        found += [f"tests/{name}:{n}" for n in fixed_waits(path.read_text())]
    assert found == [], "wait on a condition instead (tests/helpers.py wait_for): " + str(found)


def test_the_check_sees_each_form_of_a_fixed_wait() -> None:
    for line in (
        "time.sleep(0.2)",
        "    sleep(1)",
        "await asyncio.sleep(1)",
        "page.wait_for_timeout(500)",
    ):
        assert fixed_waits(line) == [1], line
    for line in ('conn.execute(text("SELECT pg_sleep(20)"))', "wait_for(lambda: done)"):
        assert fixed_waits(line) == [], line
