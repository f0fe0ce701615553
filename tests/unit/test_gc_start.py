"""The collector paused while a process starts (inbox.infra.gc_start), and who pauses it."""

from __future__ import annotations

import gc
import importlib
from collections.abc import Iterator

import click
import pytest

from inbox.infra import gc_start


@pytest.fixture(autouse=True)
def collector_restored() -> Iterator[None]:
    """Each test leaves the collector on and, as the suite's conftest has it, everything
    made so far frozen (``gc.unfreeze`` would undo that for the rest of this process)."""
    yield
    if gc_start.paused():
        gc_start.resume()
    gc.enable()
    gc.freeze()


def test_a_pause_is_resumed_with_what_was_made_frozen() -> None:
    frozen = gc.get_freeze_count()
    gc_start.pause()
    assert not gc.isenabled() and gc_start.paused()
    made = [[] for _ in range(1000)]
    gc_start.resume()
    assert gc.isenabled() and not gc_start.paused()
    assert gc.get_freeze_count() >= frozen + len(made)


def test_a_collector_its_caller_turned_off_stays_off_and_nothing_is_frozen() -> None:
    frozen = gc.get_freeze_count()  # the suite's own freeze (conftest), if any
    gc.disable()
    gc_start.pause()
    made = [[] for _ in range(1000)]
    gc_start.resume()
    assert not gc.isenabled()
    assert gc.get_freeze_count() < frozen + len(made)  # what it made was not frozen


def test_a_start_that_fails_turns_the_collector_back_on() -> None:
    with pytest.raises(RuntimeError), gc_start.starting():
        assert not gc.isenabled()
        raise RuntimeError("an import failed")
    assert gc.isenabled()


def _load_workers_under(command: str | None) -> bool:
    """Whether loading the ``workers`` package under ``celery <command>`` pauses."""
    import workers

    if command is None:
        importlib.reload(workers)
    else:
        with click.Context(click.Group("celery")) as ctx:
            ctx.invoked_subcommand = command
            importlib.reload(workers)
    return gc_start.paused()


@pytest.mark.parametrize(
    "command, pauses",
    [("worker", True), ("beat", True), ("inspect", False), ("purge", False), (None, False)],
)
def test_the_celery_command_pauses_only_to_start_a_worker_or_beat(command, pauses) -> None:
    assert _load_workers_under(command) is pauses


def test_a_worker_and_beat_resume_when_their_start_signal_comes() -> None:
    from celery.signals import beat_init, worker_init

    from workers import app

    for signal in (worker_init, beat_init):
        assert any(ref() is app._started for _, ref in signal.receivers), signal.name
    frozen = gc.get_freeze_count()
    gc_start.pause()
    made = [[] for _ in range(1000)]
    app._started()
    assert gc.isenabled() and gc.get_freeze_count() >= frozen + len(made)


def test_the_web_server_resumes_before_it_serves(monkeypatch) -> None:
    """``python -m web`` pauses as it loads ``web.serve``; ``main`` resumes before serving."""
    import granian

    from web import serve

    seen: list[bool] = []

    class Server:
        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        def on_shutdown(self, hook: object) -> None:
            pass

        def serve(self) -> None:
            seen.append(gc.isenabled())

    monkeypatch.setattr(granian, "Granian", Server)
    monkeypatch.setattr(serve, "check_start", lambda: None)
    monkeypatch.setattr(serve, "port_is_free", lambda host, port: True)
    # It would export PROMETHEUS_MULTIPROC_DIR into this test process, for good.
    monkeypatch.setattr(serve, "metrics_dir", lambda settings: None)
    gc_start.pause()
    serve.main(["--port", "1"])
    assert seen == [True]
