"""What every read shares: the tenant scope and rows as frozen dataclasses.

A read of rows that belong to tenants takes ``scope``: the tenant a token is limited to,
or None for every tenant; a row outside the scope is treated as one that does not exist.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields
from typing import Any, TypeAlias, TypeVar

from sqlalchemy import Row

from inbox.domain.records import TenantId

Scope: TypeAlias = TenantId | None
R = TypeVar("R")


def scoped(column: str) -> str:
    """The condition that keeps ``column`` (a tenant id) inside ``:scope``."""
    return f"(CAST(:scope AS bigint) IS NULL OR {column} = :scope)"


def as_rows(cls: type[R], result: Iterable[Row[Any]]) -> list[R]:
    """Each row as ``cls``, from the columns it names."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return [cls(**{k: v for k, v in r._mapping.items() if k in names}) for r in result]
