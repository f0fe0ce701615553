"""The CLI reference page, written from the ``inbox`` command tree at docs build time.

One section per command: its whole help (never a summary cut at 45 characters), its usage
line, and a table of its arguments and options saying which are required, what each takes
and its default. Text is escaped for HTML, so ``/hooks/<tenant>/<source>`` reads as typed.
``undescribed`` names the commands without help of their own (a test keeps it empty).

A mkdocs hook (mkdocs.yml): ``<!-- cli -->`` in a page becomes the reference.
"""

from __future__ import annotations

import html
from typing import Any

import click

PROG = "inbox"
MARKER = "<!-- cli -->"


def walk(cmd: click.Command, path: tuple[str, ...] = (PROG,)) -> list[tuple[str, click.Command]]:
    """Every command under ``cmd``, depth first, with its full name (``inbox sources list``)."""
    found = [(" ".join(path), cmd)]
    if isinstance(cmd, click.Group):
        for name in sorted(cmd.commands):
            sub = cmd.commands[name]
            if not sub.hidden:
                found.extend(walk(sub, (*path, name)))
    return found


def undescribed(root: click.Command) -> list[str]:
    """Commands with no help text of their own."""
    return [name for name, cmd in walk(root) if not (cmd.help or "").strip()]


def _text(raw: str) -> str:
    """Escaped for HTML; backticks stay code; pipes cannot end a table cell."""
    return html.escape(raw, quote=False).replace("|", "\\|")


def _paragraphs(help_text: str) -> list[str]:
    """Click's help paragraphs: blank-line separated, ``\\b`` keeps a block's lines."""
    out = []
    for block in help_text.strip().split("\n\n"):
        lines = [line.strip() for line in block.strip().splitlines()]
        if lines and lines[0] == "\b":
            out.append("<br>".join(_text(line) for line in lines[1:]))
        elif lines:
            out.append(_text(" ".join(lines)))
    return out


def summary(cmd: click.Command) -> str:
    """The first paragraph of a command's help, whole."""
    paras = _paragraphs(cmd.help or "")
    return paras[0] if paras else ""


def anchor(name: str) -> str:
    return name.replace(" ", "-")


def _takes(param: click.Parameter, ctx: click.Context) -> str:
    if isinstance(param, click.Option) and param.is_flag:
        return "flag"
    if isinstance(param.type, click.Choice) and len(param.type.choices) <= 10:
        return "one of " + ", ".join(f"`{c}`" for c in param.type.choices)
    metavar = param.make_metavar(ctx) if isinstance(param, click.Argument) else None
    if isinstance(param, click.Option):
        record = param.get_help_record(ctx)
        metavar = record[0].split(" ", 1)[1] if record and " " in record[0] else None
    return _text(metavar or param.type.name.upper())


def _default(param: click.Parameter, ctx: click.Context) -> str:
    if isinstance(param, click.Option) and isinstance(param.show_default, str):
        return _text(param.show_default)
    value = param.get_default(ctx, call=False)
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return ""
    return f"`{value}`"


def _names(param: click.Parameter) -> str:
    if isinstance(param, click.Argument):
        return f"`{(param.human_readable_name).upper()}`"
    names = [*param.opts, *param.secondary_opts]
    return " / ".join(f"`{n}`" for n in names)


def _help(param: click.Parameter) -> str:
    if isinstance(param, click.Option) and param.help:
        return _text(" ".join(param.help.split()))
    return ""


def _table(cmd: click.Command, ctx: click.Context) -> list[str]:
    params = [p for p in cmd.get_params(ctx) if not getattr(p, "hidden", False)]
    rows = [
        "| argument or option | takes | required | default | meaning |",
        "|---|---|---|---|---|",
    ]
    for p in params:
        need = "**required**" if p.required else ""
        if isinstance(p, click.Argument) and not p.required:
            need = "optional"
        many = " (repeatable)" if getattr(p, "multiple", False) or p.nargs == -1 else ""
        rows.append(
            f"| {_names(p)} | {_takes(p, ctx)}{many} | {need} | {_default(p, ctx)} | {_help(p)} |"
        )
    return rows


def section(name: str, cmd: click.Command) -> str:
    depth = min(name.count(" ") + 1, 4)
    ctx = click.Context(cmd, info_name=name)
    out = [f"{'#' * (depth + 1)} {name} {{#{anchor(name)}}}", ""]
    for para in _paragraphs(cmd.help or ""):
        out += [para, ""]
    usage = " ".join(cmd.collect_usage_pieces(ctx))
    out += ["```text", f"{name} {usage}", "```", ""]
    if isinstance(cmd, click.Group):
        out += ["| command | what it does |", "|---|---|"]
        for sub_name in sorted(cmd.commands):
            sub = cmd.commands[sub_name]
            if not sub.hidden:
                full = f"{name} {sub_name}"
                out.append(f"| [`{full}`](#{anchor(full)}) | {summary(sub)} |")
        out.append("")
    out += [*_table(cmd, ctx), ""]
    return "\n".join(out)


def reference(root: click.Command) -> str:
    return "\n".join(section(name, cmd) for name, cmd in walk(root))


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    if MARKER in markdown:
        from inbox.cli import main  # the whole CLI, for the one page that shows it

        markdown = markdown.replace(MARKER, reference(main))
    return markdown
