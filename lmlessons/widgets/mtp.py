"""Lesson 15 (z-loss and multi-token prediction): the targets of each MTP depth.

* :func:`mtp_label_rows`: for one row of tokens and its labels (-100 on padding), the target of
  every position at each depth 1..``depth`` (:func:`lmlessons.mtp.mtp_labels`), as the token it
  scores, ``-100`` where the position has none;
* :func:`mtp_table_html`: those rows as a coloured token table, the count of each depth beside it;
* :func:`mtp_labels_widget`: a depth slider over that table (a
  :class:`~lmlessons.widgets.base.LessonWidget`: a viewer without a kernel sees its picture).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import ipywidgets as widgets
import torch

from lmlessons._checks import IGNORE_INDEX, check_int, check_int_tensor
from lmlessons.course.palette import COLORS
from lmlessons.mtp import mtp_labels, mtp_num_items
from lmlessons.widgets.base import LessonWidget
from lmlessons.widgets.display import OutputRecord, html_output, state_output, token_table_html

__all__ = ["IGNORED", "mtp_label_rows", "mtp_count_text", "mtp_table_html", "mtp_labels_widget"]

#: What a position without a target shows.
IGNORED = "-100"
_LEGEND = {"has a target": COLORS["target"], "no target (-100)": COLORS["ignored"]}


def _row(tokens: Sequence[str], labels: object) -> tuple[list[str], torch.Tensor]:
    """``tokens`` as strings and ``labels`` as a ``(T,)`` integer tensor of the same length."""
    if isinstance(tokens, str) or not isinstance(tokens, Sequence):
        raise TypeError(f"tokens must be a list of strings, got {type(tokens).__name__}")
    row = check_int_tensor("labels", labels)
    if row.dim() != 1 or row.shape[0] != len(tokens):
        raise ValueError(
            f"labels must have shape ({len(tokens)},), one per token, got {tuple(row.shape)}"
        )
    return [str(t) for t in tokens], row


def mtp_label_rows(tokens: Sequence[str], labels: object, depth: int) -> dict[str, list[str]]:
    """``{"input": tokens, "labels": ..., "depth 1": ..., ..., "depth {depth}": ...}``: the row's
    tokens, its labels (a token, or ``-100``), and at each depth d the token position t is scored
    on, ``tokens[t + d]`` where ``mtp_labels(labels, d)[t]`` is not -100, else ``-100``."""
    words, row = _row(tokens, labels)
    depth = check_int("depth", depth, minimum=1)
    out = {"input": words, "labels": [w if int(y) != IGNORE_INDEX else IGNORED
                                      for w, y in zip(words, row.tolist())]}  # fmt: skip
    for d in range(1, depth + 1):
        targets = mtp_labels(row, d).tolist()  # (T,): labels[t + d], -100 at the end
        out[f"depth {d}"] = [
            words[t + d] if y != IGNORE_INDEX else IGNORED for t, y in enumerate(targets)
        ]
    return out


def mtp_count_text(labels: object, depth: int) -> str:
    """One line per depth 1..``depth``: its target count (:func:`lmlessons.mtp.mtp_num_items`),
    the ``num_items_in_batch`` of that depth's loss."""
    counts = mtp_num_items(check_int_tensor("labels", labels), depth).tolist()  # (depth,)
    return _count_lines(counts)


def _count_lines(counts: Sequence[int]) -> str:
    return "\n".join(f"depth {d}: {n} targets" for d, n in enumerate(counts, start=1))


def mtp_table_html(tokens: Sequence[str], labels: object, depth: int) -> str:
    """:func:`mtp_label_rows` as a token table, the cells without a target greyed."""
    rows = mtp_label_rows(tokens, labels, depth)
    colors = {
        name: [COLORS["ignored"] if v == IGNORED else COLORS["target"] for v in values]
        for name, values in rows.items()
        if name != "input"
    }
    caption = f"the target of each position, depths 1 to {depth}"
    return token_table_html(rows, colors=colors, caption=caption, legend=_LEGEND)


def mtp_labels_widget(
    tokens: Sequence[str], labels: object, *, max_depth: int = 4, depth: int = 1
) -> LessonWidget:
    """A ``depth`` slider (1..``max_depth``, starting at ``depth``) over :func:`mtp_table_html`
    and the count of each depth. Its hidden state: ``depth=3 counts=6,5,4`` (the counts of
    depths 1..depth)."""
    words, row = _row(tokens, labels)
    top = check_int("max_depth", max_depth, minimum=1)
    start = check_int("depth", depth, minimum=1)
    if start > top:
        raise ValueError(f"depth must be at most max_depth={top}, got {start}")
    slider = widgets.IntSlider(value=start, min=1, max=top, step=1, description="depth")

    def draw() -> tuple[OutputRecord, ...]:
        depth = int(slider.value)
        counts = mtp_num_items(row, depth).tolist()  # (depth,)
        state = f"depth={depth} counts={','.join(str(n) for n in counts)}"
        text = _count_lines(counts)
        table = mtp_table_html(words, row, depth)
        return (
            state_output(state),
            html_output(table + f"<pre>{html.escape(text)}</pre>", text),
        )

    return LessonWidget({"depth": slider}, draw)
