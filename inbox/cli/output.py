"""What every command prints with: aligned tables, ISO-8601 UTC times, ``--json``."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

json_option: Callable[[F], F] = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON instead of a table."
)


def when(value: datetime | None) -> str:
    """A time as ISO 8601 in UTC to the second (``2026-12-01T11:32:15Z``), or ``-``."""
    if value is None:
        return "-"
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def plain(value: Any) -> Any:
    """A value as JSON can carry it: times in ISO 8601 UTC, bytes as hex, records as dicts."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return value


def emit_json(value: Any) -> None:
    click.echo(json.dumps(plain(value), indent=2, sort_keys=True, default=str))


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """A header row and aligned columns; ``None`` shows as ``-``, times in ISO 8601 UTC."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()

    click.echo(line([h.upper() for h in headers]))
    for row in cells:
        click.echo(line(row))
    if not cells:
        click.echo("(none)")


def fields(pairs: Sequence[tuple[str, object]]) -> None:
    """A record as ``label  value`` lines, labels aligned."""
    width = max((len(k) for k, _ in pairs), default=0)
    for key, value in pairs:
        click.echo(f"{key.ljust(width)}  {_cell(value)}")


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return when(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)
