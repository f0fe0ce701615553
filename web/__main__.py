"""``python -m web``: the web process (see web/serve.py).

The collector waits while the process imports and checks its start; ``main`` resumes it
before it serves (``inbox.infra.gc_start``).
"""

from inbox.infra import gc_start

gc_start.pause()

from web.serve import main  # noqa: E402  (after the pause: the import is the start's bulk)

main()
