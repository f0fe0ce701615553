"""URL matching, remembered: the same few paths recur on every request.

werkzeug matches each request's path against the app's rules anew (a walk of its state
machine and a converter per path part): about 5 % of the receiver's instructions per
request (bench.instructions). A path that matched is matched the same way again as long
as the rules stay as they are, which Flask guarantees once the app serves (no rule may be
added after the first request). So a successful match is kept by what decides it (the
path, the method, whether the request is a websocket's) and handed out again, its view
arguments copied. Anything that did not match plainly (404, 405, a redirect) goes to
werkzeug every time. Bounded, as a stranger can send any paths.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask.ctx import RequestContext
from werkzeug.exceptions import HTTPException
from werkzeug.routing import Rule

MAX_PATHS = 4096

Match = tuple[Rule, Mapping[str, Any]]


class MatchCache:
    """The app's remembered matches (thread-safe: single dict operations)."""

    def __init__(self, max_paths: int = MAX_PATHS) -> None:
        self._found: dict[tuple[str, str, bool], Match] = {}
        self._max = max_paths

    def __len__(self) -> int:
        return len(self._found)

    def get(self, key: tuple[str, str, bool]) -> Match | None:
        return self._found.get(key)

    def put(self, key: tuple[str, str, bool], match: Match) -> None:
        if len(self._found) < self._max:
            self._found[key] = match


class MatchingContext(RequestContext):
    """A request context whose match comes from the app's ``url_matches`` (a
    ``MatchCache``) when it can: for an app without host or subdomain matching, where the
    match depends on the path, the method and the websocket flag alone."""

    def match_request(self) -> None:
        app, adapter = self.app, self.url_adapter
        matches: MatchCache | None = getattr(app, "url_matches", None)
        if (
            matches is None
            or adapter is None
            or app.url_map.host_matching
            or app.subdomain_matching
        ):
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
