"""The documentation site as a reader gets it: built by mkdocs exactly as ``make docs``
builds it, then read as files, as ``make docs-serve`` serves it, and in a real Chromium at
1280 and 390 px (screenshots in ``.data/``).
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from dev import cli_doc
from dev.embedded import free_port
from inbox.cli import main
from tests.helpers import eventually
from tests.procs import ROOT, Proc

pytestmark = pytest.mark.e2e

BIN = Path(sys.executable).parent
CHROMIUM = Path("/usr/bin/chromium")
SHOTS = ROOT / ".data"
# The pages whose layout the issue named, and the two references people read most.
LAID_OUT = [
    "explanation/architecture.html",
    "ha.html",
    "tutorial.html",
    "reference/configuration.html",
    "reference/cli.html",
    "how-to/deploy.html",
    "how-to/upgrade.html",
    "providers.html",
    "index.html",
]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [str(BIN / "mkdocs"), "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return out


class Page(HTMLParser):
    """A page's links (every href and src) and the ids its anchors can point at."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(str(found["id"]))
        for name in ("href", "src"):
            value = found.get(name)
            if value and tag in ("a", "link", "script", "img"):
                self.links.append(value)


def pages(site: Path) -> dict[Path, Page]:
    """Every page but 404.html, which a server answers at any depth (its links are absolute)."""
    found = {}
    for path in sorted(site.rglob("*.html")):
        if path.name != "404.html":
            page = Page()
            page.feed(path.read_text(encoding="utf-8"))
            found[path] = page
    return found


def local(link: str) -> bool:
    parts = urlsplit(link)
    return not (parts.scheme or link.startswith("//"))


def article_text(path: Path) -> str:
    raw = path.read_text(encoding="utf-8")
    body = raw[raw.index("<article") : raw.index("</article>")]
    return html.unescape(re.sub(r"<[^>]+>", " ", body))


# -- the CLI reference ---------------------------------------------------------------


def test_every_command_has_a_description_of_its_own():
    assert cli_doc.undescribed(main) == []


def test_the_built_cli_reference_is_whole_and_literal(site):
    page = site / "reference" / "cli.html"
    text = article_text(page)
    for wrong in ("Sentinel", "UNSET", "N/A", "No description"):
        assert wrong not in text, wrong
    assert "/hooks/<tenant>/<source>" in text  # read as text, not swallowed as a tag
    ids = pages(site)[page].ids
    raw = page.read_text(encoding="utf-8")
    # tags become spaces: none before punctuation, none after an opening parenthesis
    flat = " ".join(re.sub(r"\( ", "(", re.sub(r" ([.,:;)])", r"\1", text)).split())
    for name, cmd in cli_doc.walk(main):
        assert cli_doc.anchor(name) in ids, name
        first = " ".join((cmd.help or "").split("\n\n")[0].replace("`", "").split())
        assert first in flat, name  # the whole first paragraph, never cut
    # Every required option is marked in its command's table, and only those.
    required = sum(1 for _, cmd in cli_doc.walk(main) for p in cmd.params if p.required)
    assert required > 20
    assert raw.count("<strong>required</strong>") == required
    create = raw[raw.index('id="inbox-sources-create"') : raw.index('id="inbox-sources-disable"')]
    for option in ("--tenant", "--name", "--scheme"):
        row = create[create.index(f"<code>{option}</code>") :].split("</tr>")[0]
        assert "<strong>required</strong>" in row, option


# -- links, as files and served ---------------------------------------------------------


def test_every_link_works_opened_from_the_files(site):
    """``file://``: a link to a folder would open a directory listing, so every local link
    names a file that exists, and every #anchor an id on its page."""
    found = pages(site)
    broken = []
    checked = 0
    for path, page in found.items():
        for link in filter(local, page.links):
            parts = urlsplit(link)
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            checked += 1
            if not target.is_file():
                broken.append(f"{path.relative_to(site)}: {link}")
            elif parts.fragment and target in found and parts.fragment not in found[target].ids:
                broken.append(f"{path.relative_to(site)}: {link} (no such anchor)")
    assert broken == []
    assert checked > 1000  # the navigation alone links every page from every page


@pytest.fixture
def served() -> Iterator[str]:
    """``make docs-serve`` (mkdocs serve) on a port of this test's own."""
    port = free_port()
    proc = Proc(["make", "-s", "docs-serve", f"DOCS_PORT={port}"], {}, f"docs-serve-{port}")
    base = f"http://127.0.0.1:{port}/"

    def up() -> bool:
        try:
            with urllib.request.urlopen(base, timeout=5) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    try:
        eventually(lambda: up() or proc.popen.poll() is not None, 120, interval=0.2)
        assert up(), proc.output()
        yield base
    finally:
        proc.stop()


def test_every_link_works_served_by_make_docs_serve(site, served):
    found = pages(site)
    urls: set[str] = set()
    for path, page in found.items():
        rel = path.relative_to(site).as_posix()
        urls.add(rel)
        for link in filter(local, page.links):
            parts = urlsplit(link)
            if parts.path:
                target = (path.parent / unquote(parts.path)).resolve()
                urls.add(target.relative_to(site.resolve()).as_posix())
    urls.add("search/search_index.json")  # what the search box loads (not from files)
    failed = []
    for rel in sorted(urls):
        try:
            with urllib.request.urlopen(served + rel, timeout=30) as resp:
                if resp.status != 200:
                    failed.append(f"{rel}: {resp.status}")
        except urllib.error.HTTPError as exc:
            failed.append(f"{rel}: {exc.code}")
    assert failed == []
    assert len(urls) > 30


# -- layout in a browser ---------------------------------------------------------------

MEASURE = """() => {
  const cut = [];
  for (const c of document.querySelectorAll('article pre > code')) {
    if (c.scrollWidth > c.clientWidth + 1) cut.push(c.textContent.slice(0, 60));
  }
  const broken = [];
  for (const c of document.querySelectorAll('article td:not(:last-child) code')) {
    if (!/\\s/.test(c.textContent) && c.getClientRects().length > 1) broken.push(c.textContent);
  }
  return {
    cut, broken,
    page: document.documentElement.scrollWidth,
    view: document.documentElement.clientWidth,
  };
}"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip("no system Chromium at /usr/bin/chromium (browsers are never downloaded)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        yield b
        b.close()


def test_the_named_pages_fit_1280_px(site, browser):
    """At 1280 px nothing is cut: no code block scrolls (the architecture diagram, the HA
    topology, the tutorial's long commands), and no name in a table breaks mid-word."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        for name in LAID_OUT:
            page.goto((site / name).as_uri())
            page.screenshot(path=str(SHOTS / f"docs-1280-{name.replace('/', '-')}.png"))
            got = page.evaluate(MEASURE)
            assert got["cut"] == [] and got["broken"] == [], (name, got)
            assert got["page"] <= got["view"], (name, got)
    finally:
        page.close()


def test_the_named_pages_read_on_a_phone(site, browser):
    """At 390 px the page itself never scrolls sideways (a wide block scrolls on its own),
    and names in tables stay whole (the table scrolls instead)."""
    page = browser.new_page(viewport={"width": 390, "height": 844})
    try:
        for name in LAID_OUT:
            page.goto((site / name).as_uri())
            page.screenshot(path=str(SHOTS / f"docs-390-{name.replace('/', '-')}.png"))
            got = page.evaluate(MEASURE)
            assert got["broken"] == [], (name, got)
            assert got["page"] <= got["view"], (name, got)
    finally:
        page.close()


def test_the_navigation_opens_pages_from_the_files(site, browser):
    """What the README promises for ``site/index.html``: a click in the navigation opens
    the page, not a directory listing."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto((site / "index.html").as_uri())
        page.click("nav.md-nav--primary >> text=Configuration")
        assert page.url.endswith("reference/configuration.html"), page.url
        assert page.locator("h1").first.inner_text().startswith("Configuration")
        page.click("nav.md-nav--primary >> text=Tutorial")
        assert page.url.endswith("/tutorial.html"), page.url
        assert "Index of" not in page.content()
    finally:
        page.close()
