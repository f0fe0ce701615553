"""The shells (web, the CLI, the workers) reach the store through services: of the store
they import only the read model. import-linter says so in ``make lint``; this is the same
rule where pytest runs it, with the finder shown to find a breach."""

from __future__ import annotations

import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
SHELLS = ("web", "inbox.cli", "workers")
FORBIDDEN = ("inbox.store.db", "inbox.store.schema", "inbox.store.write")


def _contract() -> dict[str, object]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (found,) = [
        c
        for c in config["tool"]["importlinter"]["contracts"]
        if c.get("type") == "forbidden" and "inbox.store.write" in c.get("forbidden_modules", [])
    ]
    return found


def _ignored() -> set[str]:
    """The shell modules the contract exempts for now (being moved by other branches)."""
    ignored = _contract().get("ignore_imports", [])
    assert isinstance(ignored, list)
    return {line.split(" -> ")[0].strip() for line in ignored}


def breaches(imports: dict[str, set[str]], ignored: set[str]) -> list[str]:
    """``shell -> store room`` for every direct import the rule forbids."""
    return sorted(
        f"{m} -> {target}"
        for m, targets in imports.items()
        if m.startswith(SHELLS) and m not in ignored
        for target in targets
        if target.startswith(FORBIDDEN)
    )


def test_the_finder_finds_a_shell_importing_a_store_room():
    graph = {
        "web.api.events": {"inbox.store.write.redaction", "inbox.services.operations"},
        "inbox.cli.base": {"inbox.store.reads.events"},
        "inbox.services.operations": {"inbox.store.write.operator"},
        "web.ingest": {"inbox.store.db.engine"},
    }
    assert breaches(graph, {"web.ingest"}) == ["web.api.events -> inbox.store.write.redaction"]


def test_the_contract_names_the_shells_and_the_rooms():
    contract = _contract()
    assert contract["source_modules"] == list(SHELLS)
    assert contract["forbidden_modules"] == list(FORBIDDEN)


def test_no_shell_imports_a_store_room_but_the_read_model():
    graph = grimp.build_graph("inbox", "web", "workers")
    imports = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    assert breaches(imports, _ignored()) == []
