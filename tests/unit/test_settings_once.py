"""The settings are read from the environment once per process, in one place.

``inbox.infra.config.settings()`` is the one way code gets them; ``Settings.from_env``
is its reader, called nowhere else (tests give it explicit mappings); nothing hands out
``os.environ`` (ruff's banned-api keeps every other module from naming it).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("inbox", "web", "workers", "dev", "bench")
CONFIG = ROOT / "inbox" / "infra" / "config.py"


def _python_files() -> list[Path]:
    return sorted(p for top in SHIPPED for p in (ROOT / top).rglob("*.py") if p != CONFIG)


def test_nothing_but_config_reads_the_environment_into_settings() -> None:
    calls = re.compile(r"\bfrom_env\s*\(")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in _python_files()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if calls.search(line)
    ]
    assert found == [], "use inbox.infra.config.settings(): " + ", ".join(found)


def test_the_config_module_hands_out_no_environment() -> None:
    tree = ast.parse(CONFIG.read_text())
    handed = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Return)
        and node.value is not None
        and ast.unparse(node.value) in ("os.environ", "environ", "env")
    ]
    assert handed == []
