"""What the widgets show: token tables, figures as PNG, and the output records of a widget.

* ``token_table({"input": [...], "label": [...]})`` draws one row per entry, one column per
  position, with optional background colours per cell: the course's one picture of inputs and
  labels. The HTML is deterministic (no ids, no timestamps), so strict nbval can compare it.
* :func:`new_figure` and :func:`figure_png` draw without pyplot (nothing is shown twice, any
  backend works) and render a figure as PNG bytes.
* :func:`stream`, :func:`html_output` and :func:`png_output` build the records of an
  ``ipywidgets.Output`` (the nbformat output dicts a notebook stores), so a widget replaces its
  whole output in one assignment and works the same in a kernel and in plain pytest.
* :func:`state_output` is the widget's state (``key=value ...``, deterministic) as an element a
  learner never sees: ``<div class="lmlessons-state" data-state="..." hidden>``. Tests read it
  with :func:`shown_state`, the browser test waits for its ``data-state``.
* :func:`view_outputs` is what most widgets draw: the hidden state, a table, optionally a picture.
* :func:`attention_axes` draws an attention pattern as a heatmap with the query row outlined.
* :func:`outputs_html` renders output records as static HTML (a widget's kernel-free picture).
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Mapping, Sequence
from typing import Any

from IPython.display import HTML
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from lmlessons.course.palette import COLORS, on_color  # noqa: F401  (lessons import COLORS here)

#: One output record of a notebook cell or an ``ipywidgets.Output`` (nbformat's output dict).
OutputRecord = dict[str, Any]

#: Resolution of every widget figure (small, sharp enough in a notebook).
FIGURE_DPI = 80

#: The opening tag of every table the widgets draw.
TABLE_OPEN = '<table style="border-collapse:collapse;margin:4px 0;font-size:12px">'
_CELL_STYLE = (
    "padding:2px 6px;border:1px solid #bbb;text-align:center;font-family:monospace;"
    "white-space:nowrap;"
)


def _cell(value: object, color: str | None, head: bool = False) -> str:
    tag = "th" if head else "td"
    style = _CELL_STYLE
    if color:
        style += on_color(color)
    return f'<{tag} style="{style}">{html.escape(str(value))}</{tag}>'


def _check_widths(
    rows: Mapping[str, Sequence[object]],
    colors: Mapping[str, Sequence[str | None]] | None,
    column_colors: Sequence[str | None] | None,
) -> int:
    if not rows:
        raise ValueError("rows must hold at least one row")
    widths = {len(v) for v in rows.values()}
    if len(widths) != 1:
        raise ValueError(f"every row must have the same length, got lengths {sorted(widths)}")
    (width,) = widths
    if column_colors is not None and len(column_colors) != width:
        raise ValueError(f"column_colors must have {width} entries, got {len(column_colors)}")
    for name, row_colors in (colors or {}).items():
        if name in rows and len(row_colors) != width:
            raise ValueError(f"colors[{name!r}] must have {width} entries, got {len(row_colors)}")
    return width


def _row_html(
    name: str,
    values: Sequence[object],
    row_colors: Sequence[str | None] | None,
    column_colors: Sequence[str | None] | None,
) -> str:
    cells = []
    for j, v in enumerate(values):
        c = row_colors[j] if row_colors is not None else None
        if c is None and column_colors is not None:
            c = column_colors[j]
        cells.append(_cell(v, c))
    return "<tr>" + _cell(name, None, head=True) + "".join(cells) + "</tr>"


def _legend_html(legend: Mapping[str, str]) -> str:
    items = "".join(
        f'<span style="{on_color(c)}padding:1px 6px;margin-right:6px;border:1px solid #bbb">'
        f"{html.escape(k)}</span>"
        for k, c in legend.items()
    )
    return f'<div style="font-size:11px;margin-bottom:6px">{items}</div>'


def token_table_html(
    rows: Mapping[str, Sequence[object]],
    *,
    colors: Mapping[str, Sequence[str | None]] | None = None,
    column_colors: Sequence[str | None] | None = None,
    caption: str | None = None,
    legend: Mapping[str, str] | None = None,
) -> str:
    """The HTML string behind :func:`token_table`."""
    width = _check_widths(rows, colors, column_colors)
    parts = [TABLE_OPEN]
    if caption:
        parts.append(
            '<caption style="caption-side:top;text-align:left;font-weight:bold">'
            f"{html.escape(caption)}</caption>"
        )
    head = [_cell("", None, head=True)] + [_cell(i, None, head=True) for i in range(width)]
    parts.append("<tr>" + "".join(head) + "</tr>")
    for name, values in rows.items():
        parts.append(_row_html(name, values, (colors or {}).get(name), column_colors))
    parts.append("</table>")
    if legend:
        parts.append(_legend_html(legend))
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


# ---------------------------------------------------------------------------------------------
# figures
# ---------------------------------------------------------------------------------------------


def new_figure(width: float, height: float) -> Figure:
    """A matplotlib ``Figure`` of ``width`` x ``height`` inches, without pyplot: it is never
    shown by the notebook's own display hook, only where a widget puts its PNG."""
    return Figure(figsize=(width, height), dpi=FIGURE_DPI)


def figure_png(fig: Figure, *, crop: bool = False) -> bytes:
    """``fig`` as PNG bytes: laid out with ``tight_layout``, or with ``crop=True`` cut to what
    is drawn (``bbox_inches="tight"``, for a figure whose size follows its content)."""
    buffer = io.BytesIO()
    if crop:
        fig.savefig(buffer, format="png", bbox_inches="tight")
    else:
        fig.tight_layout()
        fig.savefig(buffer, format="png")
    return buffer.getvalue()


def attention_axes(
    ax: Axes, weights: Any, *, vmax: float, row: int | None = None, title: str | None = None
) -> None:
    """Draw ``weights`` ``(N, N)`` (an array) on ``ax`` as a heatmap: row = query position,
    column = key position, ``row`` outlined in green, ``title`` above."""
    n = weights.shape[0]
    ax.imshow(weights, cmap="Blues", vmin=0.0, vmax=vmax)
    ax.set_xlabel("key position j (attended to)", fontsize=9)
    ax.set_ylabel("query position i", fontsize=9)
    if row is not None:
        ax.add_patch(Rectangle((-0.5, row - 0.5), n, 1, fill=False, edgecolor="#1a9641", lw=2))
    if title:
        ax.set_title(title, fontsize=10)


# ---------------------------------------------------------------------------------------------
# output records
# ---------------------------------------------------------------------------------------------


def stream(text: str) -> OutputRecord:
    """A line printed to stdout."""
    return {"output_type": "stream", "name": "stdout", "text": text + "\n"}


def html_output(markup: str, plain: str = "<table>") -> OutputRecord:
    """Rich HTML, with ``plain`` as its text/plain form."""
    return {
        "output_type": "display_data",
        "data": {"text/html": markup, "text/plain": plain},
        "metadata": {},
    }


def png_output(png: bytes, plain: str) -> OutputRecord:
    """A PNG image (e.g. from :func:`figure_png`), with ``plain`` as its text/plain form."""
    return {
        "output_type": "display_data",
        "data": {"image/png": base64.b64encode(png).decode("ascii"), "text/plain": plain},
        "metadata": {},
    }


#: The class of the hidden element that carries a widget's state (see :func:`state_output`).
STATE_CLASS = "lmlessons-state"


def state_output(state: str) -> OutputRecord:
    """The widget's state ``key=value ...`` as a hidden element (nothing a learner sees): the
    browser test waits for its ``data-state``, tests read it with :func:`shown_state`."""
    markup = (
        f'<div class="{STATE_CLASS}" data-state="{html.escape(state, quote=True)}" hidden></div>'
    )
    return {
        "output_type": "display_data",
        "data": {"text/html": markup, "text/plain": ""},
        "metadata": {"lmlessons_state": state},
    }


def view_outputs(
    state: str, table: str, picture: OutputRecord | None = None
) -> tuple[OutputRecord, ...]:
    """A widget's output: its hidden :func:`state_output`, the ``table`` HTML, then ``picture``
    (e.g. a :func:`png_output`) when there is one."""
    outs = [state_output(state), html_output(table)]
    if picture is not None:
        outs.append(picture)
    return tuple(outs)


def is_state(record: OutputRecord) -> bool:
    """True for a record made by :func:`state_output`."""
    return "lmlessons_state" in record.get("metadata", {})


def shown_state(outputs: Sequence[OutputRecord]) -> str | None:
    """The state of the (last) :func:`state_output` record in ``outputs``; None when none."""
    states = [o["metadata"]["lmlessons_state"] for o in outputs if is_state(o)]
    return states[-1] if states else None


def _text(value: object) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def record_html(record: OutputRecord) -> str:
    """One output record as static HTML: its HTML, else its PNG, else its text (escaped)."""
    if is_state(record):
        return ""
    if record.get("output_type") == "stream":
        return f'<pre style="margin:2px 0">{html.escape(_text(record["text"]))}</pre>'
    data = record.get("data", {})
    if "text/html" in data:
        return _text(data["text/html"])
    if "image/png" in data:
        alt = html.escape(_text(data.get("text/plain", "")), quote=True)
        return f'<img src="data:image/png;base64,{_text(data["image/png"])}" alt="{alt}">'
    if "text/plain" in data:
        return f'<pre style="margin:2px 0">{html.escape(_text(data["text/plain"]))}</pre>'
    return ""


def outputs_html(outputs: Sequence[OutputRecord]) -> str:
    """Output records (e.g. an ``ipywidgets.Output``'s ``outputs``) as one static HTML block."""
    return "".join(record_html(o) for o in outputs)
