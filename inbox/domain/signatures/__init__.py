"""Webhook signature verification schemes, one module per provider.

``SCHEMES`` maps a scheme name to its singleton instance; ``get_scheme`` looks one up.
"""

from __future__ import annotations

from .base import Scheme, SchemeConfig, SignatureError, SignedRequest, Verified
from .github import GitHubScheme
from .hmac_scheme import HmacScheme
from .none import NoneScheme
from .shopify import ShopifyScheme
from .slack import SlackScheme
from .standard import StandardScheme
from .stripe import StripeScheme
from .token import TokenScheme
from .twilio import TwilioScheme

SCHEMES: dict[str, Scheme] = {
    scheme.name: scheme
    for scheme in (
        StandardScheme(),
        StripeScheme(),
        GitHubScheme(),
        ShopifyScheme(),
        SlackScheme(),
        TwilioScheme(),
        TokenScheme(),
        HmacScheme(),
        NoneScheme(),
    )
}


def get_scheme(name: str) -> Scheme:
    """The scheme called ``name``; KeyError if there is none."""
    return SCHEMES[name]


__all__ = [
    "SCHEMES",
    "Scheme",
    "SchemeConfig",
    "SignatureError",
    "SignedRequest",
    "Verified",
    "get_scheme",
]
