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


def redact(doc: Any, path: str) -> bool:
    """Replace the value at ``path`` with a marker in place; True if it existed."""
    parts = path.split(".")
    node = doc
    for part in parts[:-1]:
        node = _step(node, part)
        if node is _MISSING:
            return False
    last = parts[-1]
    if isinstance(node, dict) and last in node:
        node[last] = REDACTED
        return True
    if isinstance(node, list) and last.isdigit() and int(last) < len(node):
        node[int(last)] = REDACTED
        return True
    return False
