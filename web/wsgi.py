"""The WSGI entry point: ``python -m web`` serves ``web.wsgi:app`` (web/serve.py)."""

from inbox.infra.config import process_environment
from web import create_app
from web.keepalive import close_now_and_then, keepalive_requests

# granian starts each request's environ from a copy of the process environment, so a
# variable named like a header (HTTP_PROXY, say) would read as one the sender sent, and
# could be stored with the event. The web process makes no outbound HTTP calls.
_environ = process_environment()
for _name in [n for n in _environ if n.startswith("HTTP_") or n.startswith("CONTENT_")]:
    del _environ[_name]

app = create_app()
close_now_and_then(app, keepalive_requests())
