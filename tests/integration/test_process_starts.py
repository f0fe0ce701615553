"""Each process's start with the collector paused, and the collector running after it
(inbox.infra.gc_start): in the processes themselves, not in the test's."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "module, frozen",
    [
        ("inbox.cli", True),  # the `inbox` command
        ("web.wsgi", True),  # each web worker process, as it starts
        ("workers.app", False),  # imported outside the celery command: left as it was
        ("inbox", False),  # the playbook authors' API
    ],
)
def test_after_each_import_the_collector_runs(module: str, frozen: bool, database_url: str) -> None:
    code = f"import gc, {module}\nprint(gc.isenabled(), gc.get_freeze_count() > 0)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={"DATABASE_URL": database_url, "PATH": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", str(frozen)]
