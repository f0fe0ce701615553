"""Structured logs: one JSON object per line, with anything secret-looking redacted.

A line has ``ts``, ``level``, ``logger``, ``message`` and the record's ``extra`` fields.
Before anything is written, ``redact`` replaces the value of every key that names a
secret, signature, token, authorization, cookie, idempotency key, body or payload, and
every value shaped like a credential (``whsec_…``, ``Bearer …``, hex HMACs, ``v1=…``),
in the ``extra`` fields, in %-args (including the argument right after ``key``,
``secret``, ``signature``... in the format string) and in the final message.
Format messages with %-args or ``extra``, never with f-strings: only then can an
idempotency key, which looks like any other string, be recognised by its name.

The redactor redacts values, never the explanation: an argument that is the program's
own text (an ``Explanation``, or an exception, whose message the code wrote) keeps its
words after a sensitive word (``"signing secrets: %s"``); credential-shaped values inside
it are still replaced. While a trace is active each line also carries ``trace_id`` and
``span_id``. The field names are listed in docs/tracing.md.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import traceback
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import IO, Any

from inbox.infra import tracing

REDACTED = "[redacted]"


class Explanation(str):
    """Text the program wrote to explain something (what is missing, what to do): logged
    with its words, even after a word like "secret" or "key"; credential-shaped values
    inside it are still redacted."""

    __slots__ = ()


# Key names whose values are never logged.
_SECRET_KEY = re.compile(
    r"secret|signature|token|authori[sz]ation|cookie|idempotency|passw(or)?d|passphrase"
    r"|api[-_]?key|private[-_]?key|credential|hmac|session"
    r"|(?<![a-z])(sig|auth|key|body|payload|raw[-_]?body)(?![a-z])"
    r"|^(webhook-id|svix-id|x-github-delivery|x-shopify-webhook-id)$",
    re.IGNORECASE,
)

# Values shaped like credentials, wherever they appear in a string.
_SECRET_VALUES = [
    re.compile(r"whsec_[A-Za-z0-9+/=_\-]*"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=\-]+"),
    re.compile(r"\bBasic\s+[A-Za-z0-9+/]{8,}={0,2}"),
    re.compile(r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]+"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"\bxox[abpr]-[A-Za-z0-9\-]+"),
    re.compile(r"\beyJ[\w\-]{5,}\.[\w\-]{5,}\.[\w\-]*"),  # a JWT
    re.compile(r"(?i)\b(?:v0|v1|sha1|sha256)[=,][A-Za-z0-9+/]{16,}={0,2}"),
    re.compile(r"\b[0-9a-fA-F]{32,}\b"),  # hex HMACs and digests (our ids are shorter)
    re.compile(r"(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{20,}={1,2}"),  # padded base64 HMACs
]

# ``name=value`` / ``"name": "value"`` inside free text.
_KEY_VALUE = re.compile(
    r"""(?i)((?<![a-z])(?:secret|token|signature|sig|authorization|cookie|passw(?:or)?d"""
    r"""|api[-_]?key|idempotency[-_ ]?key)["']?\s*[:=]\s*["']?)([^\s"',;&}]+)"""
)

# A format string's placeholder that follows a sensitive word: its argument is redacted.
_PLACEHOLDER = re.compile(
    r"%(?:\((?P<name>[^)]*)\))?[#0 +\-]*(?P<width>\*|\d+)?(?:\.(?P<prec>\*|\d+))?[hlL]?"
    r"(?P<conv>[diouxXeEfFgGcrsa%])"
)
_NAMED_BEFORE = re.compile(
    r"(?i)(?<![a-z])(?:secret|token|signature|sig|authorization|auth|cookie|key|passw(?:or)?d"
    r"""|bearer|credential|hmac|body|payload)s?["']?\s*[:=]?\s*["']?$"""
)


def redact_text(text: str) -> str:
    """``text`` with every credential-shaped value replaced."""
    for pattern in _SECRET_VALUES:
        text = pattern.sub(REDACTED, text)
    return _KEY_VALUE.sub(lambda m: m.group(1) + REDACTED, text)


def excerpt(exc: BaseException | str, limit: int = 200) -> str:
    """A short, redacted excerpt of an error's message (its class is logged beside it)."""
    text = exc if isinstance(exc, str) else str(exc)
    text = " ".join(text.split())
    return redact_text(text[: limit * 2])[:limit]


def is_secret_key(key: object) -> bool:
    return isinstance(key, str) and _SECRET_KEY.search(key) is not None


def redact(obj: Any) -> Any:
    """A copy of ``obj`` with secret keys' values and secret-looking strings replaced.

    Mappings, lists, tuples and sets are walked; bytes (a body, a digest) are never
    logged; other objects are returned as they are (the formatter redacts their text).
    """
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, bytes | bytearray | memoryview):
        return REDACTED
    if isinstance(obj, Mapping):
        return {k: REDACTED if is_secret_key(k) else redact(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        items = [redact(v) for v in obj]
        return items if isinstance(obj, list) else type(obj)(items)
    return obj


def _redact_args(msg: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Each argument redacted; one that follows a sensitive word in ``msg`` replaced."""
    out = [redact(a) for a in args]
    i, start = 0, 0
    for m in _PLACEHOLDER.finditer(msg):
        if m.group("conv") == "%":
            start = m.end()
            continue
        if m.group("width") == "*" or m.group("prec") == "*" or m.group("name") is not None:
            return tuple(out)  # unusual forms: the per-argument redaction stands
        explains = i < len(args) and isinstance(args[i], Explanation | BaseException)
        if i < len(out) and not explains and _NAMED_BEFORE.search(msg[start : m.start()]):
            out[i] = REDACTED
        i, start = i + 1, m.end()
    return tuple(out)


def render_message(record: logging.LogRecord) -> str:
    """The record's message with its arguments redacted; never raises."""
    msg = record.msg if isinstance(record.msg, str) else json.dumps(redact(record.msg), default=str)
    args = record.args
    try:
        if isinstance(args, Mapping):
            msg = msg % redact(args)
        elif args:
            msg = msg % _redact_args(msg, tuple(args))
    except Exception:  # a broken format string: keep the text, drop the arguments
        msg = f"{msg} [{len(args) if isinstance(args, tuple) else 1} unformatted arguments]"
    return redact_text(msg)


_RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


def _json_default(obj: object) -> str:
    return redact_text(str(obj))


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, logger, message, then the extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": render_message(record),
        }
        for key, value in record.__dict__.items():
            if key in _RESERVED or key.startswith("_"):
                continue
            name = key if key not in doc else f"extra_{key}"
            doc[name] = REDACTED if is_secret_key(key) else redact(value)
        ids = tracing.current_ids()
        if ids is not None:  # hex ids: added after redaction, which would take them for digests
            doc["trace_id"], doc["span_id"] = ids
        if record.exc_info and record.exc_info[0] is not None:
            doc["exc"] = redact_text("".join(traceback.format_exception(*record.exc_info)))
        if record.stack_info:
            doc["stack"] = redact_text(record.stack_info)
        return json.dumps(doc, default=_json_default, ensure_ascii=False)


class _JsonHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler ``configure_logging`` installs (and replaces on a second call)."""


def configure_logging(level: str | int = "INFO", stream: IO[str] | None = None) -> None:
    """Send every log record, as redacted JSON lines, to ``stream`` (default stderr).

    Replaces a handler installed earlier by this function or by ``logging.basicConfig``;
    other handlers (files, test capture) stay.
    """
    root = logging.getLogger()
    for h in list(root.handlers):
        if isinstance(h, _JsonHandler) or type(h) is logging.StreamHandler:
            root.removeHandler(h)
    handler = _JsonHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter())
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
