"""Token tables: the course's one picture of inputs and labels, as HTML.

``token_table({"input": [...], "label": [...]})`` draws one row per entry, one column per
position, with optional background colours per cell. The HTML is deterministic (no ids, no
timestamps), so strict nbval can compare it.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

from IPython.display import HTML

# One palette for the whole course (colour-blind friendly, light enough for black text).
COLORS: dict[str, str] = {
    "special": "#d9d9d9",  # [CLS], [SEP], [PAD]
    "mask": "#f4a582",  # replaced by [MASK]
    "random": "#92c5de",  # replaced by a random token
    "kept": "#b8e186",  # selected but kept
    "target": "#fee08b",  # a position that has a label
    "ignored": "#f0f0f0",  # label -100
    "segment_a": "#c6dbef",
    "segment_b": "#fdd0a2",
}


def _cell(value: object, color: str | None, head: bool = False) -> str:
    tag = "th" if head else "td"
    style = "padding:2px 6px;border:1px solid #bbb;text-align:center;font-family:monospace;white-space:nowrap;"
    if color:
        style += f"background:{color};"
    return f'<{tag} style="{style}">{html.escape(str(value))}</{tag}>'


def token_table_html(
    rows: Mapping[str, Sequence[object]],
    *,
    colors: Mapping[str, Sequence[str | None]] | None = None,
    column_colors: Sequence[str | None] | None = None,
    caption: str | None = None,
    legend: Mapping[str, str] | None = None,
) -> str:
    """The HTML string behind :func:`token_table`."""
    if not rows:
        raise ValueError("rows must hold at least one row")
    widths = {len(v) for v in rows.values()}
    if len(widths) != 1:
        raise ValueError(f"every row must have the same length, got lengths {sorted(widths)}")
    (width,) = widths
    if column_colors is not None and len(column_colors) != width:
        raise ValueError(f"column_colors must have {width} entries, got {len(column_colors)}")
    parts = ['<table style="border-collapse:collapse;margin:4px 0;font-size:12px">']
    if caption:
        parts.append(
            f'<caption style="caption-side:top;text-align:left;font-weight:bold">{html.escape(caption)}</caption>'
        )
    parts.append(
        "<tr>"
        + _cell("", None, head=True)
        + "".join(_cell(i, None, head=True) for i in range(width))
        + "</tr>"
    )
    for name, values in rows.items():
        row_colors = (colors or {}).get(name)
        if row_colors is not None and len(row_colors) != width:
            raise ValueError(f"colors[{name!r}] must have {width} entries, got {len(row_colors)}")
        cells = []
        for j, v in enumerate(values):
            c = row_colors[j] if row_colors is not None else None
            if c is None and column_colors is not None:
                c = column_colors[j]
            cells.append(_cell(v, c))
        parts.append("<tr>" + _cell(name, None, head=True) + "".join(cells) + "</tr>")
    parts.append("</table>")
    if legend:
        items = "".join(
            f'<span style="background:{c};padding:1px 6px;margin-right:6px;border:1px solid #bbb">{html.escape(k)}</span>'
            for k, c in legend.items()
        )
        parts.append(f'<div style="font-size:11px;margin-bottom:6px">{items}</div>')
    return "".join(parts)


def token_table(
    rows: Mapping[str, Sequence[object]],
    *,
    colors: Mapping[str, Sequence[str | None]] | None = None,
    column_colors: Sequence[str | None] | None = None,
    caption: str | None = None,
    legend: Mapping[str, str] | None = None,
) -> HTML:
    """Draw tokens as a table: one row per entry of ``rows``, one column per position.

    ``colors[row][j]`` colours one cell; ``column_colors[j]`` colours a whole column (a cell
    colour wins). ``legend`` maps a label to a colour. Returns an ``IPython.display.HTML``.
    """
    return HTML(
        token_table_html(
            rows, colors=colors, column_colors=column_colors, caption=caption, legend=legend
        )
    )
