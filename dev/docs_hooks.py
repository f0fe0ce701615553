"""mkdocs hooks: pages generated from the code when the docs are built.

``<!-- settings -->`` in a page becomes the table of every setting, read from the
declarations of ``inbox.infra.config.Settings`` (nothing of it is checked in).
"""

from __future__ import annotations

from typing import Any

from inbox.infra.config import documented, undocumented

MARKER = "<!-- settings -->"


def settings_table() -> str:
    missing = undocumented()
    if missing:
        raise ValueError(
            f"Settings fields without setting(ENV, default, doc): {', '.join(missing)}"
        )
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for s in documented():
        doc = s.doc.replace("|", "\\|")
        rows.append(f"| `{s.env}` | {s.default} | {doc} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, settings_table())
    return markdown
