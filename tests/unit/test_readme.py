"""The README is a front page: short, and every link in it leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def test_the_readme_is_a_front_page():
    assert len(README.read_bytes()) < 12_000


def test_every_relative_link_of_the_readme_exists():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if "://" not in link]
    assert local, "the README links to the docs"
    for link in local:
        assert (ROOT / link).exists(), link


def test_the_readme_names_the_files_it_tells_you_about():
    text = README.read_text()
    for path in re.findall(r"`((?:deploy|docs|dev|bench)/[\w./-]+)`", text):
        assert (ROOT / path).exists(), path


def test_the_env_file_honcho_reads_is_ignored_by_git():
    # docs/how-to/deploy.md suggests credentials in .env, and says git ignores it.
    ignored = (ROOT / ".gitignore").read_text().split()
    assert ".env" in ignored
