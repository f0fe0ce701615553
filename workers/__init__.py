"""Celery workers: thin tasks over the plain functions in ``inbox``.

When the ``celery`` command loads this package to start a worker (the Procfile's worker
and courier) or beat, the garbage collector waits until the process has started
(``inbox.infra.gc_start``; ``workers.app`` resumes it at ``worker_init`` and ``beat_init``).
Celery's command line is click's, so its context names the subcommand it is about to run;
anything else that imports the package (a test, ``celery inspect``) leaves the collector
as it was.
"""

import click

from inbox.infra import gc_start

_command = click.get_current_context(silent=True)
if _command is not None and _command.invoked_subcommand in ("worker", "beat"):
    gc_start.pause()
