"""docs/explanation/architecture.md is a map: every module of inbox/infra/ is on it, and
every file or folder it names (in the tables, the diagram of one event's path and the
text) exists, so a module that moves or is added without the map fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "explanation" / "architecture.md"
NAMED = re.compile(r"(?<![\w./])((?:inbox|web|workers|tests|bench|deploy|dev)/[\w./-]*\w/?)")


def named_paths(text: str) -> list[str]:
    """Every repository path the text names, from the top folder down."""
    return sorted(set(NAMED.findall(text)))


def test_the_finder_finds_paths_in_prose_tables_and_diagrams():
    text = "`inbox/infra/config.py` | shell  web/receiver.py  Receiver, in inbox/store/db/ and docs"
    assert named_paths(text) == ["inbox/infra/config.py", "inbox/store/db/", "web/receiver.py"]


def test_every_path_the_page_names_exists():
    names = named_paths(PAGE.read_text())
    assert len(names) > 30, names  # the diagram and the tables were read
    missing = [n for n in names if not (ROOT / n).exists()]
    assert missing == []


def test_the_infra_row_names_every_module_of_infra():
    (row,) = [line for line in PAGE.read_text().splitlines() if line.startswith("| `inbox/infra/`")]
    modules = sorted(
        p.name for p in (ROOT / "inbox" / "infra").glob("*.py") if p.stem != "__init__"
    )
    assert len(modules) >= 8
    assert [m for m in modules if f"`{m}`" not in row] == []


def test_the_path_of_one_event_runs_through_every_layer():
    text = PAGE.read_text()
    diagram = text[text.index("## One event's path") :].split("```")[1]
    layers = {line.split()[0] for line in diagram.splitlines() if line and not line[0].isspace()}
    assert {"shell", "domain", "service", "store", "database", "infra", "outbound"} <= layers
    steps = [
        "web/receiver.py",
        "inbox/services/intake.py",
        "inbox/store/db/group_commit.py",
        "inbox/services/drain.py",
        "inbox/services/courier.py",
        "inbox/outbound/client.py",
    ]
    for step in steps:
        assert step in diagram, step
