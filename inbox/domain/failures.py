"""What is kept of a failed attempt: the step, the error, and a short redacted traceback.

The traceback keeps only where the error went through (file, line, function) and the
exception's own line; no local variables and no source text, and the message goes
through the same credential filter as a callback's answer excerpt
(``inbox.services.courier.redact_excerpt``). Pure.
"""

from __future__ import annotations

import re
import traceback
from pathlib import PurePath

MESSAGE_LIMIT = 2000
TRACEBACK_LIMIT = 1500
FRAMES = 6  # the innermost ones: where it failed, and what called it

_SECRETISH = re.compile(
    r"(?i)(\"?(?:secret|token|password|passwd|api[_-]?key|authorization)\"?\s*[:=]\s*)"
    r"(\"[^\"]*\"|[^\s,}&]+)"
)
_LONG_TOKEN = re.compile(r"[A-Za-z0-9+/_\-]{24,}")


def redact(text: str, limit: int) -> str:
    """``text`` without anything that looks like a credential, at most ``limit`` characters."""
    text = _SECRETISH.sub(lambda m: m.group(1) + '"[redacted]"', text[: limit * 2])
    return _LONG_TOKEN.sub("[redacted]", text)[:limit]


def _where(filename: str) -> str:
    """The last two parts of a path: enough to find the module, nothing of the host."""
    parts = PurePath(filename).parts
    return "/".join(parts[-2:]) if parts else filename


def traceback_excerpt(exc: BaseException) -> str:
    """The innermost frames as ``pkg/module.py:12 in fn`` lines, then ``Class: message``."""
    frames = traceback.extract_tb(exc.__traceback__)[-FRAMES:]
    lines = [f"{_where(f.filename)}:{f.lineno} in {f.name}" for f in frames]
    # Only the message can carry data; the frames are code locations.
    lines.append(redact(f"{type(exc).__name__}: {exc}", MESSAGE_LIMIT))
    return "\n".join(lines)[-TRACEBACK_LIMIT:]
