"""The CLI's value types: every value is checked where it is parsed, and a bad one is a
usage error that names the option (``Invalid value for '--rate': ...``), never a traceback
from deep inside a command.

``TEXT`` is the default type of every string option and argument (see ``base._Command``):
an empty, blank, over-long or control-character value is refused before anything runs.
"""

from __future__ import annotations

import difflib
import math
from typing import Any

import click

MAX_TEXT = 10_000  # a recipe or body schema given inline fits; a runaway paste does not


class Text(click.ParamType[str]):
    """A non-empty string without control characters, at most ``MAX_TEXT`` characters."""

    name = "text"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = value if isinstance(value, str) else str(value)
        if not text.strip():
            self.fail("must not be empty", param, ctx)
        if len(text) > MAX_TEXT:
            self.fail(f"is {len(text)} characters long; at most {MAX_TEXT}", param, ctx)
        if any((ord(c) < 32 and c not in "\t\n\r") or ord(c) == 127 for c in text):
            self.fail("contains a control character", param, ctx)
        return text


TEXT = Text()


class Rate(click.FloatRange):
    """Items a second: more than 0, at most ``top``, and a real number (not nan)."""

    def __init__(self, top: float) -> None:
        super().__init__(min=0, min_open=True, max=top)

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        rate: float = super().convert(value, param, ctx)
        if math.isnan(rate):
            self.fail("is not a number", param, ctx)
        return rate


class Seconds(click.ParamType[list[int]]):
    """Comma-separated whole seconds, e.g. ``5,30,120``: 1 to 20 values, each 0-86400."""

    name = "seconds"
    MOST, LONGEST = 20, 86_400

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> list[int]:
        if isinstance(value, list):
            return value
        parts = [p.strip() for p in str(value).split(",")]
        if not any(parts) or len(parts) > self.MOST:
            self.fail(f"give 1 to {self.MOST} comma-separated whole seconds", param, ctx)
        out: list[int] = []
        for part in parts:
            if not part.isdigit() or not part.isascii():
                self.fail(f"{part!r} is not a whole number of seconds (e.g. 5,30,120)", param, ctx)
            if int(part) > self.LONGEST:
                self.fail(f"{part} s is more than a day ({self.LONGEST} s)", param, ctx)
            out.append(int(part))
        return out


LIMIT = click.IntRange(1, 10_000)


class Named(click.Choice[str]):
    """One of many names (a scheme): a typo is answered with the closest names, not all."""

    def __init__(self, names: list[str], what: str, listed_by: str) -> None:
        super().__init__(names)
        self.name = what
        self.listed_by = listed_by

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str:
        return self.name.upper()

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        if value in self.choices:
            return str(value)
        close = difflib.get_close_matches(str(value), [str(c) for c in self.choices], n=3)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        self.fail(f"{value!r} is not a {self.name}; {hint}{self.listed_by} lists them", param, ctx)
