"""The web process: the Flask app (``web.app``) and the server that runs it (``web.serve``).

Importing this package loads neither: the server's main process must set up the
Prometheus multiprocess directory before anything imports ``prometheus_client``, and it
never needs the app itself (its workers load ``web.wsgi``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from web.app import create_app as create_app


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from web.app import create_app

        return create_app
    raise AttributeError(name)
