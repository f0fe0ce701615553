"""A static shared token in a header (``authorization`` by default, ``Bearer`` allowed)."""

from __future__ import annotations

import time

from ._common import header, require_match
from .base import GENERIC_ANSWER, Answer, Scheme, SchemeConfig, SignedRequest, Verified

_DEFAULT_HEADER = "authorization"
_BEARER = "bearer "
_OKTA = "x-okta-verification-challenge"


def _candidates(name: str, value: str) -> list[str]:
    out = [value]
    if name == _DEFAULT_HEADER and value[: len(_BEARER)].lower() == _BEARER:
        out.append(value[len(_BEARER) :].strip())
    return out


class TokenScheme(Scheme):
    name = "token"
    summary = (
        "a shared token in Authorization (Bearer allowed) or the header option; answers Okta's GET"
    )
    content_types = frozenset({"application/json"})
    accept_docs = GENERIC_ANSWER

    def _verify(self, req: SignedRequest, cfg: SchemeConfig, now: float) -> Verified:
        name = (cfg.header or _DEFAULT_HEADER).lower()
        received = [c.encode("utf-8") for c in _candidates(name, header(req, name)) if c]
        require_match(received, cfg, lambda secret: secret.encode("utf-8"))
        return Verified()

    def get_challenge(self, req: SignedRequest, cfg: SchemeConfig) -> Answer | None:
        """Okta's one-time verification GET: echo the challenge once the token verifies."""
        challenge = req.headers.get(_OKTA)
        if not challenge:
            return None
        self.verify(req, cfg, time.time())
        return Answer(200, {"verification": challenge})
