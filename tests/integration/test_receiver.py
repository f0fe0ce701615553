"""The accepted path served beside Flask (web/receiver.py) answers as the Flask view does."""

from __future__ import annotations

import pytest
from flask import Flask

from tests.helpers import body_of, hmac_headers
from web.app import create_app
from web.receiver import Receiver, unmount

SECRET = "s3cret"


@pytest.fixture
def flask_only(settings, engine, bell) -> Flask:
    """The same app with the receiver unmounted: every request through Flask's view."""
    app = create_app(settings, engine=engine, doorbell=bell, route_cache_seconds=0)
    assert isinstance(app.wsgi_app, Receiver)
    unmount(app)
    return app


def _shown(resp) -> tuple[int, dict, bytes]:
    headers = {k: v for k, v in resp.headers.items() if k not in ("Date",)}
    return resp.status_code, headers, resp.data


def _cases(src, other):
    body = body_of({"a": 1})
    big = b'{"pad": "' + b"x" * 2048 + b'"}'
    return {
        "accepted": (src.path, body, hmac_headers(SECRET, body, "k-1")),
        "duplicate": (src.path, body, hmac_headers(SECRET, body, "k-1")),
        "conflict": (src.path, body_of({"a": 2}), hmac_headers(SECRET, body_of({"a": 2}), "k-1")),
        "bad signature": (src.path, body, hmac_headers("wrong", body, "k-2")),
        "no key": (src.path, body, hmac_headers(SECRET, body, None)),
        "not JSON": (src.path, b"{nope", hmac_headers(SECRET, b"{nope", "k-3")),
        "too large": (src.path, big, hmac_headers(SECRET, big, "k-4")),
        "unknown source": (src.path + "x", body, hmac_headers(SECRET, body, "k-5")),
        "disabled source": (other.path, body, hmac_headers(SECRET, body, "k-6")),
        "bad path": ("/hooks/" + "t" * 300 + "/s", body, hmac_headers(SECRET, body, "k-7")),
    }


def test_every_answer_is_the_flask_views_answer(app, flask_only, make_source, engine):
    """The same requests, in the same order, against two tenants' sources: one app with
    the receiver mounted, one without; statuses, headers and bodies (ids aside) agree."""
    from inbox.store.write import sources as store

    answers = {}
    for name, which in (("fast", app), ("flask", flask_only)):
        src = make_source(max_body_bytes=1024)
        other = make_source()
        with engine.begin() as conn:
            store.set_enabled(conn, other, False)
        client = which.test_client()
        got = {}
        for case, (path, body, headers) in _cases(src, other).items():
            code, hdrs, data = _shown(client.post(path, data=body, headers=headers))
            got[case] = (code, hdrs, data if code >= 400 else None)
        answers[name] = got
    for case in answers["flask"]:
        assert answers["fast"][case] == answers["flask"][case], case
    assert answers["fast"]["accepted"][0] == 202
    assert answers["fast"]["duplicate"][1]["Idempotent-Replayed"] == "true"
    assert answers["fast"]["conflict"][0] == 422
    assert answers["fast"]["too large"][0] == 413


def test_the_accepted_path_does_not_dispatch_through_flask(app, make_source):
    src = make_source()

    ran: list[str] = []

    def view(tenant: str, source: str) -> tuple[str, int]:
        ran.append(source)
        return "", 299

    app.view_functions["hooks.receive"] = view
    body = body_of({"a": 1})
    resp = app.test_client().post(src.path, data=body, headers=hmac_headers(SECRET, body, "k"))
    assert resp.status_code == 202 and resp.json["status"] == "accepted"
    assert ran == []
    # What the receiver leaves to Flask (here a GET) still reaches the view.
    assert app.test_client().get(src.path).status_code == 299
    assert ran == [src.name]
