"""Inline SVG charts, drawn on the server: bars, stacked bars and lines, one per bucket.

The drawing stretches to its box (``preserveAspectRatio="none"``) and holds no text,
so it reads the same on a phone and a desktop; labels live in the page around it.
Each bucket has a transparent hit area with a ``<title>`` (the browser's tooltip) and
``data-k`` / ``data-value`` attributes that tests read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from markupsafe import Markup, escape

WIDTH, HEIGHT = 600, 120
_PAD = 2  # leave room for a line's stroke at the top and bottom


def _number(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:.1f}"


def _open(name: str, label: str, attr: str, value: float) -> str:
    """The ``<svg>`` tag; ``attr`` (data-total or data-now) sums it up for scripts."""
    return (
        f'<svg class="chart chart-{escape(name)}" viewBox="0 0 {WIDTH} {HEIGHT}"'
        f' preserveAspectRatio="none" role="img" aria-label="{escape(label)}"'
        f' data-measure="{escape(name)}" {attr}="{_number(value)}">'
    )


def _hits(
    n: int, labels: Sequence[str], values: Sequence[float], text: Callable[[int], str]
) -> list[str]:
    pitch = WIDTH / n
    return [
        f'<rect class="hit" x="{k * pitch:.2f}" y="0" width="{pitch:.2f}" height="{HEIGHT}"'
        f' data-k="{k}" data-value="{_number(values[k])}">'
        f"<title>{escape(labels[k])}: {escape(text(k))}</title></rect>"
        for k in range(n)
    ]


def bars(name: str, label: str, values: Sequence[float], labels: Sequence[str]) -> Markup:
    n, top = len(values), max(values, default=0) or 1
    pitch = WIDTH / n
    parts = [_open(name, label, "data-total", sum(values))]
    for k, v in enumerate(values):
        if v:
            h = max(1.0, v / top * (HEIGHT - _PAD))
            parts.append(
                f'<rect class="bar" x="{k * pitch + pitch * 0.1:.2f}" y="{HEIGHT - h:.2f}"'
                f' width="{pitch * 0.8:.2f}" height="{h:.2f}"/>'
            )
    parts += _hits(n, labels, values, lambda k: _number(values[k]))
    parts.append("</svg>")
    return Markup("".join(parts))


def stacked(
    name: str,
    label: str,
    layers: Sequence[tuple[str, str, Sequence[float]]],
    labels: Sequence[str],
) -> Markup:
    """Bars stacked from ``layers`` of (css class, legend, values), bottom first."""
    n = len(labels)
    totals = [sum(layer[2][k] for layer in layers) for k in range(n)]
    top, pitch = max(totals, default=0) or 1, WIDTH / n
    parts = [_open(name, label, "data-total", sum(totals))]
    for k in range(n):
        y = float(HEIGHT)
        for css, _, values in layers:
            if values[k]:
                h = max(1.0, values[k] / top * (HEIGHT - _PAD))
                y -= h
                parts.append(
                    f'<rect class="bar {escape(css)}" x="{k * pitch + pitch * 0.1:.2f}"'
                    f' y="{y:.2f}" width="{pitch * 0.8:.2f}" height="{h:.2f}"/>'
                )

    def text(k: int) -> str:
        return ", ".join(f"{legend} {_number(values[k])}" for _, legend, values in layers)

    parts += _hits(n, labels, totals, text)
    parts.append("</svg>")
    return Markup("".join(parts))


def line(
    name: str,
    label: str,
    values: Sequence[float],
    labels: Sequence[str],
    fmt: Callable[[float], str] = _number,
) -> Markup:
    n, top = len(values), max(values, default=0) or 1
    pitch = WIDTH / n
    points = " ".join(
        f"{k * pitch + pitch / 2:.2f},{HEIGHT - _PAD - v / top * (HEIGHT - 2 * _PAD):.2f}"
        for k, v in enumerate(values)
    )
    parts = [_open(name, label, "data-now", values[-1] if values else 0)]
    parts.append(
        f'<polyline class="line" points="{points}" fill="none" vector-effect="non-scaling-stroke"/>'
    )
    parts += _hits(n, labels, values, lambda k: fmt(values[k]))
    parts.append("</svg>")
    return Markup("".join(parts))
