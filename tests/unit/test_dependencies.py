"""pyproject.toml names each dependency once: a second line for the same package is a
second place to change its bound, and the two drift (it happened with cryptography)."""

from __future__ import annotations

import re
import tomllib
from collections import Counter
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _name(requirement: str) -> str:
    """The distribution's name, normalised as PEP 503 does (extras and bounds dropped)."""
    found = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert found, requirement
    return re.sub(r"[-_.]+", "-", found.group(0)).lower()


def test_each_dependency_is_listed_once_per_group() -> None:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    groups = {"dependencies": project["dependencies"], **project["optional-dependencies"]}
    for group, requirements in groups.items():
        twice = [n for n, c in Counter(map(_name, requirements)).items() if c > 1]
        assert not twice, f"{group} lists {twice} more than once"
