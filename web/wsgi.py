"""The WSGI entry point: ``python -m web`` serves ``web.wsgi:app`` (web/serve.py).

Each web worker process imports this module once, as it starts: the collector waits until
the app is made, then what it made is frozen (``inbox.infra.gc_start``).
"""

from inbox.infra import gc_start

with gc_start.starting():
    from inbox.infra import config
    from web import create_app
    from web.keepalive import close_now_and_then, keepalive_requests

    # granian starts each request's environ from a copy of the process environment, so a
    # variable named like a header (HTTP_PROXY, say) would read as one the sender sent, and
    # could be stored with the event. The web process makes no outbound HTTP calls.
    config.drop_variables(("HTTP_", "CONTENT_"))

    app = create_app()
    close_now_and_then(app, keepalive_requests())
