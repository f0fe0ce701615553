"""Webhook signature verification schemes.

Most providers are recipes: data in ``recipes.json`` run by one engine (``recipe_scheme``).
Code remains only for what a recipe cannot say: Twilio's URL-and-parameters canonical
form, Standard Webhooks (its library, and Ed25519 v1a), the asymmetric providers
(Discord, SendGrid), a static token with Okta's GET, and ``none``.

``SCHEMES`` maps a scheme name to its instance; ``scheme_for`` also builds the scheme of
a source whose scheme is ``recipe`` from its ``recipe`` option.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from .asymmetric import DiscordInteractionsScheme, DiscordScheme, SendGridScheme
from .base import (
    GENERIC_ANSWER,
    Answer,
    Scheme,
    SchemeConfig,
    SignatureError,
    SignedRequest,
    Verified,
)
from .none import NoneScheme
from .recipe import Recipe, RecipeError, parse_recipe
from .recipe_scheme import RecipeScheme, dumps
from .standard import StandardScheme
from .token import TokenScheme
from .twilio import TwilioScheme

CUSTOM = "recipe"  # the scheme of a source that brings its own recipe


class _CustomRecipe(Scheme):
    """Stands for ``--scheme recipe`` in listings; a source gets its own RecipeScheme."""

    name = CUSTOM
    accept_docs = GENERIC_ANSWER
    summary = "your own recipe, given as the source's recipe option (docs/recipes.md)"

    def _verify(self, req: SignedRequest, cfg: SchemeConfig, now: float) -> Verified:
        raise SignatureError("the source has no valid recipe option")


def _builtin_recipes() -> list[Recipe]:
    text = resources.files(__package__).joinpath("recipes.json").read_text("utf-8")
    return [parse_recipe(raw) for raw in json.loads(text)]


def _registry() -> dict[str, Scheme]:
    coded: list[Scheme] = [
        StandardScheme(),
        TwilioScheme(),
        SendGridScheme(),
        DiscordScheme(),
        DiscordInteractionsScheme(),
        TokenScheme(),
        NoneScheme(),
        _CustomRecipe(),
    ]
    out: dict[str, Scheme] = {}
    for scheme in [*coded, *(RecipeScheme(r) for r in _builtin_recipes())]:
        if scheme.name in out:
            raise RuntimeError(f"two schemes are called {scheme.name}")
        out[scheme.name] = scheme
    return out


SCHEMES: dict[str, Scheme] = _registry()


def get_scheme(name: str) -> Scheme:
    """The scheme called ``name``; KeyError if there is none."""
    return SCHEMES[name]


@functools.lru_cache(maxsize=256)
def _custom(text: str) -> RecipeScheme:
    return RecipeScheme(parse_recipe(json.loads(text)))


def scheme_for(name: str, recipe: dict[str, Any] | None = None) -> Scheme:
    """The scheme a source uses: its own recipe when ``name`` is ``recipe``."""
    if name == CUSTOM and recipe is not None:
        try:
            return _custom(dumps(recipe))
        except RecipeError:  # stored before a stricter check: refuse its requests (401)
            return SCHEMES[CUSTOM]
    return SCHEMES[name]


__all__ = [
    "CUSTOM",
    "SCHEMES",
    "Answer",
    "Recipe",
    "RecipeError",
    "Scheme",
    "SchemeConfig",
    "SignatureError",
    "SignedRequest",
    "Verified",
    "get_scheme",
    "parse_recipe",
    "scheme_for",
]
