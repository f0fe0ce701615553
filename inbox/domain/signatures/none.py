"""No authentication at all: every request passes. Only for local testing."""

from __future__ import annotations

from .base import GENERIC_ANSWER, Scheme, SchemeConfig, SignedRequest, Verified


class NoneScheme(Scheme):
    name = "none"
    summary = "nothing: anyone who knows the URL can post (local testing only)"
    content_types = frozenset({"application/json"})
    accept_docs = GENERIC_ANSWER
    insecure = True

    def _verify(self, req: SignedRequest, cfg: SchemeConfig, now: float) -> Verified:
        return Verified()
