"""No import circle among the project's modules: no module imports, directly or through
others, a module that imports it back (imports inside functions count too)."""

from __future__ import annotations

import grimp

PACKAGES = ("inbox", "web", "workers")


def reachable(imports: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen: set[str] = set()
    todo = list(imports.get(start, ()))
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(imports.get(module, ()))
    return seen


def circles(imports: dict[str, set[str]]) -> list[str]:
    """The modules that import themselves back, directly or through others."""
    return sorted(m for m in imports if m in reachable(imports, m))


def test_the_finder_finds_a_circle_and_only_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert circles(graph) == ["a", "b", "c", "e"]
    assert circles({"a": {"b"}, "b": {"c"}, "d": {"a", "c"}}) == []


def test_no_module_of_the_project_imports_itself_back():
    graph = grimp.build_graph(*PACKAGES)
    ours = {m for m in graph.modules if m.split(".")[0] in PACKAGES}
    imports = {m: graph.find_modules_directly_imported_by(m) & ours for m in ours}
    assert len(ours) > 100  # the whole project, not an empty graph
    assert circles(imports) == []
