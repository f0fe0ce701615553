"""Remembered URL matches (web.matching): the same answers as werkzeug's, its work once."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask, request, url_for
from werkzeug.routing import Map, MapAdapter

from web.app import InboxFlask
from web.matching import MatchCache


def _app() -> Flask:
    app = InboxFlask(__name__)

    @app.route("/hooks/<tenant>/<source>", methods=["POST"])
    def hook(tenant: str, source: str) -> str:
        args = request.view_args
        assert args is not None
        args["tenant"] = "changed"  # a view may change its own copy
        return f"{tenant}/{source}"

    @app.route("/n/<int:n>")
    def number(n: int) -> str:
        return repr(n)

    @app.route("/dir/")
    def directory() -> str:
        return "dir"

    return app


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths werkzeug was asked to match."""
    seen: list[str] = []
    real = MapAdapter.match

    def match(self: MapAdapter, *args: Any, **kwargs: Any) -> Any:
        seen.append(self.path_info)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(MapAdapter, "match", match)
    return seen


def test_a_path_is_matched_once_and_answered_the_same(counted: list[str]) -> None:
    client = _app().test_client()
    for _ in range(3):
        assert client.post("/hooks/acme/stripe").text == "acme/stripe"
    assert client.post("/hooks/acme/github").text == "acme/github"
    assert client.get("/n/7").text == "7"  # converted arguments kept as converted
    assert client.get("/n/7").text == "7"
    assert counted == ["/hooks/acme/stripe", "/hooks/acme/github", "/n/7"]


def test_misses_go_to_werkzeug_every_time(counted: list[str]) -> None:
    client = _app().test_client()
    for _ in range(2):
        assert client.get("/nowhere").status_code == 404
        assert client.get("/hooks/acme/stripe").status_code == 405  # another method
        assert client.get("/dir").status_code == 308  # the slash redirect
    assert client.get("/n/x").status_code == 404
    assert counted.count("/nowhere") == 2
    assert counted.count("/hooks/acme/stripe") == 2
    assert counted.count("/dir") == 2


def test_the_method_is_part_of_the_key(counted: list[str]) -> None:
    client = _app().test_client()
    assert client.post("/hooks/a/b").status_code == 200
    assert client.put("/hooks/a/b").status_code == 405  # not the POST's match
    assert client.post("/hooks/a/b").status_code == 200
    assert counted == ["/hooks/a/b", "/hooks/a/b"]


def test_the_remembered_paths_are_bounded() -> None:
    app = _app()
    app.url_matches = MatchCache(max_paths=2)  # type: ignore[attr-defined]
    client = app.test_client()
    for n in range(5):
        assert client.post(f"/hooks/t/s{n}").text == f"t/s{n}"
    assert len(app.url_matches) == 2  # type: ignore[attr-defined]
    assert client.post("/hooks/t/s4").text == "t/s4"  # unremembered, still answered


def test_host_matching_apps_match_as_werkzeug_does(counted: list[str]) -> None:
    app = InboxFlask(__name__)
    app.url_map.host_matching = True

    @app.route("/x", host="a.example")
    def x() -> str:
        return "a"

    client = app.test_client()
    assert client.get("/x", headers={"Host": "a.example"}).text == "a"
    assert client.get("/x", headers={"Host": "b.example"}).status_code == 404
    assert counted == ["/x", "/x"]


@pytest.fixture
def bound(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The hosts werkzeug was asked to bind a request for."""
    seen: list[str] = []
    real = Map.bind_to_environ

    def bind_to_environ(self: Map, environ: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(environ.get("HTTP_HOST"))
        return real(self, environ, *args, **kwargs)

    monkeypatch.setattr(Map, "bind_to_environ", bind_to_environ)
    return seen


def _host_app() -> Flask:
    app = InboxFlask(__name__)

    @app.route("/where")
    def where() -> str:
        return f"{request.host} {url_for('where', _external=True)}"

    return app


def test_a_binding_is_made_once_per_host_and_line(bound: list[str]) -> None:
    client = _host_app().test_client()
    for _ in range(2):
        assert client.get("/where", headers={"Host": "a.example"}).text == (
            "a.example http://a.example/where"
        )
        assert client.get("/where", headers={"Host": "b.example:8080"}).text == (
            "b.example:8080 http://b.example:8080/where"
        )
    assert client.get("/where?x=1", headers={"Host": "a.example"}).status_code == 200
    assert bound == ["a.example", "b.example:8080", "a.example"]


def test_trusted_hosts_are_checked_by_werkzeug_every_time(bound: list[str]) -> None:
    app = _host_app()
    app.config["TRUSTED_HOSTS"] = ["good.example"]
    client = app.test_client()
    for _ in range(2):
        assert client.get("/where", headers={"Host": "good.example"}).status_code == 200
        assert client.get("/where", headers={"Host": "evil.example"}).status_code == 400
    assert bound == ["good.example"] * 2  # not remembered with TRUSTED_HOSTS (evil: refused first)
