"""The Celery app is made from the settings at import, without I/O; what needs I/O (start
checks, playbook modules, the engine and alarms) waits for the process to start."""

from __future__ import annotations

import os
import subprocess
import sys

from dev.embedded import free_port

IMPORT = """
import workers.app, workers.beat, workers.tasks
from workers import state
assert state._current is None, "worker state made at import"
print(workers.app.app.main, workers.app.settings.broker_url)
"""


def test_importing_the_workers_connects_to_nothing_and_loads_no_playbook():
    dead = free_port()  # nothing listens there: any connection attempt would fail or hang
    env = {
        "PATH": os.environ.get("PATH", ""),
        "DATABASE_URL": f"postgresql://postgres@127.0.0.1:{dead}/nothing",
        "REDIS_URL": f"redis://127.0.0.1:{dead}/0",
        "INBOX_PLAYBOOKS": "no_such_module_of_playbooks",  # loading it would stop the process
    }
    done = subprocess.run(
        [sys.executable, "-c", IMPORT], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["webhook_inbox", f"redis://127.0.0.1:{dead}/0"]


def test_a_process_state_is_made_from_the_app_settings_on_first_use():
    from workers import state
    from workers.app import app, settings

    state.use(None)
    try:
        made = state.current()
        assert made.settings is settings and made.app is app and made.engine_ is None
        assert state.current() is made  # one per process
    finally:
        state.use(None)
