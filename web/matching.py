"""URL binding and matching, remembered: the same few request lines recur all day.

For every request werkzeug binds the app's rules to the request (the host checked and
parsed, twice, and the path, script name and query decoded) and then matches the path
against them anew (a walk of its state machine and a converter per path part): 8 % and
5 % of the receiver's time per request in a profile of bench.instructions' loop. Both
depend on nothing but a few environ values and on the rules, which Flask does not let
change once the app serves (no rule may be added after the first request). So each is
kept by what decides it and handed out again: the bound adapter (which nothing changes
once made) with the host Flask would have set, by the environ values werkzeug reads; a
successful match, its view arguments copied, by the path, the method and the websocket
flag. A request that fails either (a host refused, 404, 405, a redirect) goes to werkzeug
every time; so does every request of an app with host or subdomain matching, a
``SERVER_NAME`` or ``TRUSTED_HOSTS``. Bounded, as a stranger can send any paths.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from flask import Flask, Request
from flask.ctx import RequestContext
from werkzeug.exceptions import HTTPException
from werkzeug.routing import MapAdapter, Rule

MAX_PATHS = 4096

K = TypeVar("K")
V = TypeVar("V")
Match = tuple[Rule, Mapping[str, Any]]
Binding = tuple[MapAdapter, str]  # the adapter and the request's host


class Remembered(Generic[K, V]):
    """A bounded map that keeps its first ``max_paths`` entries (thread-safe: single
    dict operations; a race stores one of two equal values)."""

    def __init__(self, max_paths: int = MAX_PATHS) -> None:
        self._found: dict[K, V] = {}
        self._max = max_paths

    def __len__(self) -> int:
        return len(self._found)

    def get(self, key: K) -> V | None:
        return self._found.get(key)

    def put(self, key: K, value: V) -> None:
        if len(self._found) < self._max:
            self._found[key] = value


MatchCache = Remembered[tuple[str, str, bool], Match]
BindingCache = Remembered[tuple[Any, ...], Binding]


def plain(app: Flask) -> bool:
    """Whether the app's binding and matching depend on the environ values alone."""
    config = app.config
    return not (
        app.url_map.host_matching
        or app.subdomain_matching
        or config["SERVER_NAME"] is not None
        or config["TRUSTED_HOSTS"] is not None
    )


def bind(app: Flask, request: Request, bindings: BindingCache) -> MapAdapter | None:
    """The request's URL adapter (``app.create_url_adapter``'s), remembered; the host
    Flask sets on the request is set as Flask would."""
    env = request.environ
    key = (  # what get_host and bind_to_environ read
        env.get("HTTP_HOST"),
        env.get("SERVER_NAME"),
        env.get("SERVER_PORT"),
        env.get("wsgi.url_scheme"),
        env.get("HTTP_CONNECTION"),
        env.get("HTTP_UPGRADE"),
        env.get("SCRIPT_NAME"),
        env.get("PATH_INFO"),
        env.get("QUERY_STRING"),
        env.get("REQUEST_METHOD"),
    )
    found = bindings.get(key)
    if found is not None:
        adapter, request.host = found
        return adapter
    made = Flask.create_url_adapter(app, request)  # raises for a refused host
    if made is not None:
        bindings.put(key, (made, request.host))
    return made


class MatchingContext(RequestContext):
    """A request context whose match comes from the app's ``url_matches`` (a
    ``MatchCache``) when it can: for an app without host or subdomain matching, where the
    match depends on the path, the method and the websocket flag alone."""

    def match_request(self) -> None:
        app, adapter = self.app, self.url_adapter
        matches: MatchCache | None = getattr(app, "url_matches", None)
        if matches is None or adapter is None or not plain(app):
            return super().match_request()
        key = (adapter.path_info, adapter.default_method, adapter.websocket)
        found = matches.get(key)
        if found is None:
            try:
                found = adapter.match(return_rule=True)
            except HTTPException as e:
                self.request.routing_exception = e
                return
            matches.put(key, found)
        rule, args = found
        self.request.url_rule, self.request.view_args = rule, dict(args)
