"""CEL filters: which events of a source run, and which events reach an endpoint.

A source's ``filter`` option is a CEL expression over ``body`` (the parsed body) and
``headers`` (the request's headers, lower-case names); an event for which it is not
true is stored as ``filtered`` with the reason, answered as accepted, and never run.
An endpoint's ``filter`` sees ``type`` (the callback's event type) and ``payload`` (its
data); a callback for which it is not true is not written (docs/reference/filters.md).

An expression is compiled once (``program``: cached by its text, so once per source or
endpoint that names it), never per request; an invalid one is refused when it is set,
with the parser's first line.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from inbox.domain.errors import BadRequest

if TYPE_CHECKING:
    import cel

# CEL: ``common-expression-language`` (PyPI), Python bindings of the Rust ``cel`` crate
# (cel-rust). Chosen over ``cel-python`` (a pure-Python interpreter): released more often,
# it ships manylinux/macOS/Windows wheels for CPython 3.11 and later (no compiler needed),
# evaluates in native code (about 40 µs for a typical filter on the ingest path), and its
# ``compile`` gives a reusable ``Program`` and a parser message with line and column.
# Imported on first use: the package's ``import cel`` also loads its command line (typer,
# rich, prompt_toolkit), about 0.4 s of CPU at every process's start, for sources and
# endpoints most of which have no filter.

MAX_LENGTH = 4096  # characters: a filter is a condition, not a program
SOURCE_VARIABLES = frozenset({"body", "headers"})
ENDPOINT_VARIABLES = frozenset({"type", "payload"})
_REASON_CHARS = 500


class FilterError(BadRequest, ValueError):
    """An expression that does not parse, or names a variable it cannot see."""


def _first_line(message: str) -> str:
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    # The binding's message repeats the expression, then the parser's lines: keep the
    # parser's first ("ERROR: <input>:1:13: Syntax error: ...").
    for ln in lines:
        if "ERROR: " in ln:
            return ln.split("ERROR: ", 1)[1]
    return lines[0] if lines else "invalid expression"


@functools.lru_cache(maxsize=1024)
def program(expression: str) -> cel.Program:
    """The compiled expression; raises FilterError with the parser's message."""
    import cel

    try:
        return cel.compile(expression)
    except (ValueError, RuntimeError) as exc:
        raise FilterError(_first_line(str(exc))) from None


def check(expression: str, variables: frozenset[str], what: str) -> None:
    """Refuse (BadRequest, one line) an expression that cannot be compiled, is too long,
    or reads a variable other than ``variables``."""
    if not expression.strip():
        raise BadRequest(f"Invalid {what}: the expression is empty.", fields={"filter": "empty"})
    if len(expression) > MAX_LENGTH:
        raise BadRequest(
            f"Invalid {what}: longer than {MAX_LENGTH} characters.", fields={"filter": "too long"}
        )
    try:
        compiled = program(expression)
    except FilterError as exc:
        raise BadRequest(f"Invalid {what}: {exc}", fields={"filter": "invalid CEL"}) from None
    unknown = sorted(set(compiled.variables()) - variables)
    if unknown:
        seen = ", ".join(sorted(variables))
        message = f"unknown variable {', '.join(unknown)} (it sees {seen})"
        raise BadRequest(f"Invalid {what}: {message}.", fields={"filter": "unknown variable"})


def _verdict(expression: str, context: Mapping[str, Any]) -> str | None:
    """None when the expression is true; else why not (false, not a bool, or an error)."""
    try:
        result = program(expression).execute(dict(context))
    except Exception as exc:  # a missing field, a type error: the event does not match
        problem = f"no such key {exc}" if isinstance(exc, KeyError) else str(exc)
        return _clip(f"filter could not be evaluated ({problem}): {expression}")
    if result is True:
        return None
    if result is False:
        return _clip(f"filter is false: {expression}")
    return _clip(f"filter returned {type(result).__name__}, not a bool: {expression}")


def _clip(text: str) -> str:
    one = " ".join(text.split())
    return one if len(one) <= _REASON_CHARS else one[: _REASON_CHARS - 1] + "…"


def source_reason(expression: str, body: Any, headers: Mapping[str, str]) -> str | None:
    """Why an event of a source with this filter is filtered; None when it runs."""
    lowered = {k.lower(): v for k, v in headers.items()}
    return _verdict(expression, {"body": body, "headers": lowered})


def endpoint_matches(expression: str, event_type: str, payload: Any) -> bool:
    """Whether a callback of this type and payload goes to an endpoint with this filter."""
    return _verdict(expression, {"type": event_type, "payload": payload}) is None
