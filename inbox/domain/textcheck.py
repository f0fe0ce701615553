"""Checks on untrusted text and JSON before anything reaches the database.

Pure and cheap. PostgreSQL refuses a NUL in text and jsonb, and UTF-8 cannot carry a lone
surrogate (JSON's ``"\\ud800"`` decodes to one): such a value is the sender's mistake, so it
is a 400 at the edge, never a DataError deep in a shared INSERT (where it would fail the
other requests batched with it). JSON nesting is bounded before ``json.loads`` runs, because
the standard parser recurses and a 100,000-deep array is a RecursionError.
"""

from __future__ import annotations

from collections.abc import Iterable

from inbox.domain.errors import BadRequest

MAX_JSON_DEPTH = 256

_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_OPEN = frozenset(b"[{")
_PASSES = 16


def _outside_strings(body: bytes) -> bytes:
    """The bytes outside JSON strings. Backslash pairs go first, then escaped quotes: what
    is left of each string lies between two plain quotes. All of it runs in C (a regex
    over a 1 MiB body took 100 ms; this takes about 1)."""
    plain = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    return b"".join(plain.split(b'"')[::2])


def json_too_deep(body: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when arrays and objects nest more than ``limit`` levels, brackets inside strings
    not counted. Iterative: the bytes are scanned, never parsed."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False  # the usual case, decided at C speed
    brackets = _outside_strings(body).translate(None, _NOT_BRACKETS)
    # Strip innermost pairs a few times (C speed): a usual body, a few levels deep, is
    # empty after a few passes.
    # A pass takes off one or two levels, so emptied in p passes means at most 2p deep.
    rest, passes = brackets, 0
    while rest and passes < _PASSES:
        shorter = rest.replace(b"[]", b"").replace(b"{}", b"")
        if len(shorter) == len(rest):
            break
        rest, passes = shorter, passes + 1
    if not rest and 2 * passes <= limit:
        return False
    # Deep or unbalanced: count exactly (one Python step per bracket), stopping past the limit.
    depth = 0
    for byte in brackets:
        if byte in _OPEN:
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def check_json_depth(body: bytes, limit: int = MAX_JSON_DEPTH) -> None:
    if json_too_deep(body, limit):
        raise BadRequest(f"The JSON body nests too deep (more than {limit} levels).")


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as text, or None."""
    if "\x00" in value:
        return "contains a NUL character"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "contains a lone surrogate (not valid Unicode)"
    return None


def check_text(value: str, what: str, max_length: int | None = None) -> str:
    """``value`` unchanged, or a 400 naming ``what``."""
    problem = text_problem(value)
    if problem is not None:
        raise BadRequest(f"{what} {problem}.")
    if max_length is not None and len(value) > max_length:
        raise BadRequest(f"{what} is longer than {max_length} characters.")
    return value


def check_texts(values: Iterable[tuple[str, str]], max_length: int | None = None) -> None:
    """Each ``(what, value)`` pair through ``check_text``."""
    for what, value in values:
        check_text(value, what, max_length)


def check_json_strings(value: object, what: str = "The JSON body") -> None:
    """Every key and string inside a parsed JSON value, without recursion."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            check_text(item, f"A string in {what[0].lower()}{what[1:]}")
        elif isinstance(item, dict):
            for key, inner in item.items():
                stack.append(key)
                stack.append(inner)
        elif isinstance(item, list):
            stack.extend(item)
