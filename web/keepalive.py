"""Closing keep-alive connections now and then, as nginx's ``keepalive_requests`` does.

A connection stays with the worker process that accepted it, so without a limit an
unlucky split of long-lived connections (a busy sender's, a proxy's) would never even
out. Each answer closes its connection (``Connection: close``) with probability 1/n, so
a connection carries n requests on average and connections opened together are not
closed together. The server does the closing; the sender opens a new connection, which
any worker may accept.
"""

from __future__ import annotations

import random

from flask import Flask, Response

from inbox.infra import config
from inbox.infra.config import Settings
from web.receiver import Receiver


def keepalive_requests(settings: Settings | None = None) -> int:
    """``WEB_KEEPALIVE_REQUESTS``: requests per connection on average; 0 never closes."""
    return (settings or config.settings()).keepalive_requests


def close_now_and_then(app: Flask, every: int) -> None:
    if every <= 0:
        return
    chance = 1.0 / every
    if isinstance(app.wsgi_app, Receiver):  # the answers it gives without Flask
        app.wsgi_app.close_chance = chance

    @app.after_request
    def _maybe_close(response: Response) -> Response:
        if random.random() < chance:
            response.headers["Connection"] = "close"
        return response
