"""mkdocs hooks: pages generated from the code when the docs are built.

``<!-- settings -->`` in a page becomes the table of every setting, read from the
declarations of ``inbox.infra.config.Settings``; ``<!-- schemes -->`` the table of every
signature scheme, as ``inbox sources schemes`` prints it. Nothing of either is checked in;
the CLI reference is made by ``dev/cli_doc.py``, a hook of its own.
"""

from __future__ import annotations

from typing import Any

from inbox.domain.signatures import SCHEMES
from inbox.infra.config import documented, undocumented

MARKER = "<!-- settings -->"
SCHEMES_MARKER = "<!-- schemes -->"


def settings_table() -> str:
    missing = undocumented()
    if missing:
        raise ValueError(
            f"Settings fields without setting(ENV, default, doc): {', '.join(missing)}"
        )
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for s in documented():
        rows.append(f"| `{s.env}` | {s.default} | {_cell(s.doc)} |")
    return "\n".join(rows)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _where(locations: tuple[str, ...]) -> str:
    return " or ".join(f"`{x}`" for x in locations) if locations else "—"


def schemes_table() -> str:
    rows = [
        "| scheme | answer | verifies | dedup key | event type |",
        "|---|---|---|---|---|",
    ]
    for name in sorted(SCHEMES):
        s = SCHEMES[name]
        dedup = _where(s.event_id_from) if s.event_id_from else ""
        dedup = dedup or ("body digest" if s.body_identity else "—")
        rows.append(
            f"| `{name}` | {s.accept_status} | {_cell(s.summary)} | {dedup} "
            f"| {_where(s.event_type_from)} |"
        )
    return "\n".join(rows)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, settings_table())
    if SCHEMES_MARKER in markdown:
        markdown = markdown.replace(SCHEMES_MARKER, schemes_table())
    return markdown
