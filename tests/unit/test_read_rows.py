"""The read model hands out frozen rows: no query in ``inbox.store.reads`` is annotated to
return a dict keyed by column names (or ``Any``), and every row type it returns, and every
row type inside one, is a frozen dataclass with slots."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import importlib
import inspect
import pkgutil
import types
import typing
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Connection

import inbox.store.reads
from inbox.store.reads import detail
from inbox.store.schema.ledger_tables import events

# Values a row may carry as they are (JSON payloads are ``dict[str, Any]`` *fields*).
PLAIN = (
    type(None), bool, int, float, str, bytes, datetime.datetime, datetime.date,
    datetime.timedelta, decimal.Decimal,
)  # fmt: skip


def _modules() -> list[types.ModuleType]:
    names = pkgutil.iter_modules(inbox.store.reads.__path__, "inbox.store.reads.")
    return [importlib.import_module(m.name) for m in names]


def queries() -> Iterator[tuple[str, Any]]:
    """Every public function of the read model that takes a connection: a query."""
    for module in _modules():
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if name.startswith("_") or fn.__module__ != module.__name__:
                continue
            hints = typing.get_type_hints(fn)
            if Connection in hints.values():
                yield f"{module.__name__}.{name}", hints.get("return")


def problems(hint: Any, where: str, seen: set[type] | None = None) -> list[str]:
    """What is wrong with ``hint`` as a query's answer: dict rows, ``Any``, rows that are
    not frozen dataclasses with slots (looked at all the way down)."""
    seen = set() if seen is None else seen
    if hint is Any:
        return [f"{where}: Any (say which row)"]
    if hint is dict:
        return [f"{where}: a bare dict"]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is dict:
        if args and args[0] is str:
            return [f"{where}: dict[str, ...] (a row keyed by column names)"]
        return [p for a in args for p in problems(a, where, seen)]
    if origin is not None:  # list[...], tuple[...], X | None, Sequence[...]
        return [p for a in args if a is not Ellipsis for p in problems(a, where, seen)]
    if not isinstance(hint, type) or hint in PLAIN or hint in seen:
        return []
    if issubclass(hint, enum.Enum):  # a typed value (a state, a status), not a row
        return []
    seen.add(hint)
    if not dataclasses.is_dataclass(hint):
        return [f"{where}: {hint.__name__} is not a dataclass"]
    out = []
    params = hint.__dataclass_params__  # type: ignore[attr-defined]
    if not params.frozen or "__slots__" not in vars(hint):
        out.append(f"{where}: {hint.__name__} is not frozen with slots")
    fields = typing.get_type_hints(hint)
    for f in dataclasses.fields(hint):
        if not _payload(fields[f.name]):
            out += problems(fields[f.name], f"{where} → {hint.__name__}.{f.name}", seen)
    return out


def _payload(hint: Any) -> bool:
    """A field that holds data, not rows: a JSON payload (a decision, headers, a step's
    result) or a mapping of values (a dashboard's series by measure)."""
    if hint is Any:
        return True
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (types.UnionType, typing.Union) and len(args) == 1:
        hint = args[0]
    return typing.get_origin(hint) is dict


def test_the_read_model_has_queries():
    found = dict(queries())
    assert len(found) > 30
    assert "inbox.store.reads.events.event_detail" in found


@pytest.mark.parametrize(("name", "hint"), list(queries()), ids=lambda v: str(v))
def test_a_query_returns_frozen_rows(name: str, hint: Any) -> None:
    assert hint is not None, f"{name} has no return annotation"
    assert problems(hint, name) == []


@dataclasses.dataclass
class Loose:
    x: int


@dataclasses.dataclass(frozen=True, slots=True)
class Outer:
    inner: tuple[Loose, ...]
    payload: dict[str, Any]  # data: allowed


def test_the_check_finds_dict_rows_and_loose_rows():
    assert problems(dict[str, Any] | None, "q")
    assert problems(list[dict[str, Any]], "q")
    assert problems(list[Any], "q")
    assert problems(dict, "q")
    assert problems(list[Loose], "q")
    assert problems(Outer, "q") == ["q → Outer.inner: Loose is not frozen with slots"]
    assert problems(dict[int, int], "q") == []
    assert problems(list[detail.EventDetail] | None, "q") == []


def test_an_event_detail_shows_every_column_but_keys_and_digests():
    """A column added to the ledger appears in the detail, or is named here as hidden."""
    hidden = {"key_digest", "business_key_digest", "ordering_key", "response_body"}
    hidden |= {"key_id", "headers_sealed"}  # shown opened: ``headers``, ``sealed``, ``erased``
    hidden |= {"lane_position"}  # the lane's sort key: shown as ``occurred_at`` / ``version``
    renamed = {"newer_event_id": "newer_event"}
    shown = {renamed.get(c.name, c.name) for c in events.c if c.name not in hidden}
    assert shown <= {f.name for f in dataclasses.fields(detail.EventDetail)}
