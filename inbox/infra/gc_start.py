"""The garbage collector paused while a long-lived process starts, then its start frozen.

A worker, courier, beat or web process makes 130,000-180,000 tracked objects as it imports
and starts (the ORM's tables and statements, the driver, Celery, Flask), and the
collector's passes over them as they pile up cost a sixth to two fifths of a start's CPU,
and nearly half of an ``inbox`` command's (bench/README.md, "What does a process cost to
start?"). None of it is garbage: it is the process's code and
configuration, kept until it exits. So the process pauses the collector as it starts,
then freezes what it made (``gc.freeze``: later full passes skip those objects, and a
forked pool process shares their pages instead of copying each one a pass touches) and
turns collection back on. What became garbage during the start (little: a start keeps
what it makes) is frozen with the rest and kept.

Paused, the collector does not skip the work, it defers it: the first pass after
``gc.enable`` sees everything made meanwhile. The freeze is what saves it.

``pause`` does nothing where the collector was already off (a caller's own choice), and
``resume`` only undoes a ``pause`` of this process: an import never leaves the collector
off, and a fork inherits the state with the memory.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_paused = False


def pause() -> None:
    """Turn the collector off until ``resume``, unless it is off already."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    """After a ``pause``: freeze every object made so far, then turn the collector back on."""
    global _paused
    if _paused:
        gc.freeze()
        gc.enable()
        _paused = False


@contextmanager
def starting() -> Iterator[None]:
    """``pause`` for the block (a process's imports and set-up), then ``resume``."""
    pause()
    try:
        yield
    finally:
        resume()


def paused() -> bool:
    """Whether a ``pause`` of this process is in effect (for tests)."""
    return _paused
