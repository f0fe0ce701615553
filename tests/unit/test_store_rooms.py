"""The store's rooms import only downward: write over reads over schema over db (the
import-linter contract in pyproject.toml says the same; this names the offending line)."""

from __future__ import annotations

import grimp

ROOMS = ("inbox.store.db", "inbox.store.schema", "inbox.store.reads", "inbox.store.write")


def room(module: str) -> int | None:
    """The room's height (db is 0), or None outside the rooms."""
    for height, name in enumerate(ROOMS):
        if module == name or module.startswith(name + "."):
            return height
    return None


def upward(imports: dict[str, set[str]]) -> list[str]:
    """Every import of a room above the importer's own."""
    found = []
    for importer, imported in imports.items():
        mine = room(importer)
        for other in imported:
            theirs = room(other)
            if mine is not None and theirs is not None and theirs > mine:
                found.append(f"{importer} imports {other}")
    return sorted(found)


def test_the_check_finds_an_upward_import():
    graph = {
        "inbox.store.db.group_commit": {"inbox.store.write.claims"},
        "inbox.store.write.intake": {"inbox.store.db.claims", "inbox.store.reads.events"},
        "inbox.store.reads.events": {"inbox.store.schema.tables", "inbox.domain.ledger"},
    }
    assert upward(graph) == ["inbox.store.db.group_commit imports inbox.store.write.claims"]


def test_no_room_of_the_store_imports_a_room_above_it():
    graph = grimp.build_graph("inbox")
    store = {m for m in graph.modules if room(m) is not None}
    assert len(store) > 40
    assert upward({m: graph.find_modules_directly_imported_by(m) for m in store}) == []
