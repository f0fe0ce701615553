"""Dotted JSON paths (``data.object.id``, ``items.0.sku``): read and redact.

Deliberately tiny: sources name fields with dotted paths; full JSONPath would
be a dependency for a feature nobody configures.
"""

from __future__ import annotations

from typing import Any

REDACTED = "[redacted]"
_MISSING = object()


def _step(node: Any, part: str) -> Any:
    if isinstance(node, dict):
        return node.get(part, _MISSING)
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    return _MISSING


def get(doc: Any, path: str) -> Any | None:
    """The value at ``path`` or ``None``; lists of one value (form fields) unwrap."""
    node = doc
    for part in path.split("."):
        node = _step(node, part)
        if node is _MISSING:
            return None
    if isinstance(node, list) and len(node) == 1 and not isinstance(node[0], (dict, list)):
        return node[0]
    return node


def get_text(doc: Any, path: str) -> str | None:
    """The value at ``path`` as text (scalars only), or ``None``."""
    value = get(doc, path)
    if value is None or isinstance(value, (dict, list)):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def redacted_copy(doc: Any, path: str) -> Any:
    """``doc`` with the value at ``path`` replaced by the marker, as ``redact`` does, but
    copied only along the path: ``doc`` itself is left as it was."""
    return _copy_redact(doc, path.split("."))


def _copy_redact(node: Any, parts: list[str]) -> Any:
    head, rest = parts[0], parts[1:]
    if isinstance(node, dict):
        keys = list(node) if head == "*" else [head] if head in node else []
        if not keys:
            return node
        out = dict(node)
        for key in keys:
            out[key] = _copy_redact(node[key], rest) if rest else REDACTED
        return out
    if isinstance(node, list):
        if head == "*":
            return [_copy_redact(item, rest) if rest else REDACTED for item in node]
        if head.isdigit() and int(head) < len(node):
            items = list(node)
            items[int(head)] = _copy_redact(node[int(head)], rest) if rest else REDACTED
            return items
    return node


def redact(doc: Any, path: str) -> bool:
    """Replace the value at ``path`` with a marker in place; True if it existed. A ``*``
    part stands for every item of a list (or value of an object): ``*.attemptNumber``."""
    return _redact(doc, path.split("."))


def _redact(node: Any, parts: list[str]) -> bool:
    head, rest = parts[0], parts[1:]
    if head == "*":
        children = node if isinstance(node, list) else []
        if isinstance(node, dict):
            children = list(node.values())
        if not rest:
            hit = bool(children)
            if isinstance(node, list):
                node[:] = [REDACTED] * len(node)
            elif isinstance(node, dict):
                node.update(dict.fromkeys(node, REDACTED))
            return hit
        hit = False
        for child in children:
            hit = _redact(child, rest) or hit
        return hit
    if rest:
        child = _step(node, head)
        return child is not _MISSING and _redact(child, rest)
    if isinstance(node, dict) and head in node:
        node[head] = REDACTED
        return True
    if isinstance(node, list) and head.isdigit() and int(head) < len(node):
        node[int(head)] = REDACTED
        return True
    return False
