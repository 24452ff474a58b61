"""Lessons 03 (CLM label shift) and 04 (BERT as a decoder): widgets and plot helpers.

* :func:`shift_table_html`: the course's picture of next-token labels, a two-row token table
  with the inputs below and the labels above, moved one to the left (``-100`` where nothing is
  learned). ``shift=2`` draws what *pre-shifted* labels train: next-next-token prediction.
* :func:`plot_attention`: an attention pattern (a mask or measured probabilities) as a heatmap.
* :func:`position_widget` (lesson 03): a ``position`` slider; the output shows what that
  position may attend to and which token it must predict.
* :func:`is_decoder_widget` (lesson 04): the same ``position`` slider (the first control) and an
  ``is_decoder`` toggle that switches between two measured attention patterns.

Both widgets write one hidden state (``state_output``) per redraw, e.g.
``is_decoder=True position=3 sees=4 predicts=dog sees_answer=False``, so a browser test
can check that moving the slider re-ran the callback. Both are a
:class:`~lmlessons.widgets.base.LessonWidget`: the output is replaced in one assignment, so they
work the same in a kernel and in plain pytest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as widgets
import torch
from matplotlib.patches import Rectangle

from lmlessons._checks import IGNORE_INDEX
from lmlessons.causality import causal_mask
from lmlessons.course.training import smoothed
from lmlessons.widgets.base import LessonWidget
from lmlessons.widgets.display import (
    COLORS,
    OutputRecord,
    attention_axes,
    figure_png,
    new_figure,
    png_output,
    token_table_html,
    view_outputs,
)

__all__ = [
    "IGNORED",
    "label_strings",
    "shifted_targets",
    "shift_table_html",
    "position_view",
    "position_marker",
    "position_table_html",
    "plot_attention",
    "position_widget",
    "is_decoder_widget",
    "plot_logit_change",
    "plot_loss_curves",
]

IGNORED = str(IGNORE_INDEX)  #: how a label that is ignored (-100) is written in the tables

#: Colours of the "what position t sees" row (the course palette of
#: :mod:`lmlessons.widgets.display`).
VIEW_COLORS: dict[str, str] = {
    "current": COLORS["kept"],  # the position itself
    "visible": COLORS["segment_a"],  # may attend to it
    "hidden": COLORS["ignored"],  # masked out: it cannot attend to it
    "answer_visible": COLORS["mask"],  # the token it must predict, and it can see it: a leak
}
_VIEW_LEGEND = {
    "position t": VIEW_COLORS["current"],
    "visible to t": VIEW_COLORS["visible"],
    "hidden from t": VIEW_COLORS["hidden"],
    "t's answer, visible (leak!)": VIEW_COLORS["answer_visible"],
    "t's target": COLORS["target"],
}
_SHIFT_LEGEND = {
    "label: learned": COLORS["target"],
    "label -100: nothing learned": COLORS["ignored"],
}


# ---------------------------------------------------------------------------------------------
# the shift, as a token table
# ---------------------------------------------------------------------------------------------


def label_strings(tokenizer: Any, labels: Sequence[int] | torch.Tensor) -> list[str]:
    """Tokens of a ``(T,)`` label row, with ``-100`` written as ``"-100"``."""
    values = labels.tolist() if isinstance(labels, torch.Tensor) else list(labels)
    if values and isinstance(values[0], list):
        raise ValueError("labels must be one row (T,), not a batch")
    return [
        IGNORED if v == IGNORE_INDEX else tokenizer.convert_ids_to_tokens(int(v)) for v in values
    ]


def _check_tokens(name: str, tokens: object) -> list[str]:
    if isinstance(tokens, str) or not isinstance(tokens, Sequence):
        raise TypeError(f"{name} must be a list of token strings, got {type(tokens).__name__}")
    if len(tokens) == 0:
        raise ValueError(f"{name} must not be empty")
    return [str(t) for t in tokens]


def shifted_targets(label_tokens: Sequence[str], shift: int = 1) -> list[str]:
    """``out[t] = label_tokens[t + shift]``, ``"-100"`` where ``t + shift`` is past the end.

    ``shift=1`` is what position ``t`` learns from ``labels = input_ids.clone()`` (the shift of
    ``ForCausalLMLoss``); ``shift=2`` is what it learns from labels someone already shifted.
    """
    labels = _check_tokens("label_tokens", label_tokens)
    if isinstance(shift, bool) or not isinstance(shift, int) or shift < 0:
        raise ValueError(f"shift must be an int >= 0, got {shift!r}")
    return [labels[t + shift] if t + shift < len(labels) else IGNORED for t in range(len(labels))]


def shift_table_html(
    input_tokens: Sequence[str],
    label_tokens: Sequence[str] | None = None,
    *,
    shift: int = 1,
    caption: str | None = None,
    label_name: str | None = None,
) -> str:
    """Two rows: the labels position ``t`` learns (above) and the input tokens (below).

    ``label_tokens`` are the *unshifted* labels as strings (``"-100"`` for ignored; default: the
    inputs themselves, i.e. ``labels = input_ids.clone()``); the top row holds
    ``label_tokens[t + shift]``, so with ``shift=1`` it is the bottom row moved one to the left.
    """
    inputs = _check_tokens("input_tokens", input_tokens)
    labels = inputs if label_tokens is None else _check_tokens("label_tokens", label_tokens)
    if len(labels) != len(inputs):
        raise ValueError(
            f"label_tokens must have one entry per input token ({len(inputs)}), got {len(labels)}"
        )
    top = shifted_targets(labels, shift)
    name = label_name or (
        "labels, as learned (shifted left by 1)" if shift == 1 else f"learned target (t + {shift})"
    )
    rows = {name: top, "input_ids": inputs}
    colors = {name: [COLORS["ignored"] if v == IGNORED else COLORS["target"] for v in top]}
    return token_table_html(rows, colors=colors, caption=caption, legend=_SHIFT_LEGEND)


# ---------------------------------------------------------------------------------------------
# what position t sees and must predict
# ---------------------------------------------------------------------------------------------


def _check_pattern(pattern: object, length: int) -> torch.Tensor:
    if not isinstance(pattern, torch.Tensor):
        raise TypeError(f"pattern must be a (T, T) torch.Tensor, got {type(pattern).__name__}")
    if tuple(pattern.shape) != (length, length):
        raise ValueError(
            f"pattern must have shape ({length}, {length}) (one row per token), got "
            f"{tuple(pattern.shape)}"
        )
    return pattern.detach().float()


def position_view(
    pattern: torch.Tensor,
    tokens: Sequence[str],
    position: int,
    label_tokens: Sequence[str] | None = None,
) -> dict[str, Any]:
    """What ``position`` sees in ``pattern`` ``(T, T)`` (a mask or attention probabilities: a
    column is visible when its entry is > 0) and what it must predict.

    Returns ``visible`` (list of bools), ``sees`` (their number), ``predicts`` (the token at
    ``t + 1`` of the labels, ``"-100"`` at the last position) and ``sees_answer`` (whether
    position ``t + 1`` is visible to ``t``: the leak).
    """
    toks = _check_tokens("tokens", tokens)
    weights = _check_pattern(pattern, len(toks))
    _check_position(position, len(toks))
    labels = toks if label_tokens is None else _check_tokens("label_tokens", label_tokens)
    visible = [bool(w > 0) for w in weights[position].tolist()]
    has_next = position + 1 < len(toks)
    return {
        "position": position,
        "visible": visible,
        "sees": sum(visible),
        "predicts": labels[position + 1] if has_next else IGNORED,
        "sees_answer": bool(has_next and visible[position + 1]),
    }


def position_marker(view: Mapping[str, Any], *, is_decoder: bool | None = None) -> str:
    """The hidden state, e.g.
    ``is_decoder=True position=3 sees=4 predicts=dog sees_answer=False``
    (lesson 03 leaves out ``is_decoder``). Deterministic: no times, no addresses."""
    head = "" if is_decoder is None else f"is_decoder={bool(is_decoder)} "
    return (
        f"{head}position={view['position']} sees={view['sees']} predicts={view['predicts']} "
        f"sees_answer={view['sees_answer']}"
    )


def position_table_html(
    tokens: Sequence[str], view: Mapping[str, Any], *, caption: str | None = None
) -> str:
    """Two rows: the target of position ``t`` (above, only in column ``t``) and the inputs (below),
    coloured by what ``t`` sees: itself, visible, hidden, or its answer, visible (a leak)."""
    toks = _check_tokens("tokens", tokens)
    t = int(view["position"])
    row_colors: list[str | None] = []
    for j, vis in enumerate(view["visible"]):
        if j == t:
            row_colors.append(VIEW_COLORS["current"])
        elif j == t + 1 and vis:
            row_colors.append(VIEW_COLORS["answer_visible"])
        else:
            row_colors.append(VIEW_COLORS["visible"] if vis else VIEW_COLORS["hidden"])
    target_row = ["" for _ in toks]
    target_row[t] = str(view["predicts"])
    target_colors: list[str | None] = [None for _ in toks]
    target_colors[t] = COLORS["ignored"] if view["predicts"] == IGNORED else COLORS["target"]
    target_name = f"target of position {t}"
    rows = {target_name: target_row, "input_ids": toks}
    colors = {target_name: target_colors, "input_ids": row_colors}
    return token_table_html(rows, colors=colors, caption=caption, legend=_VIEW_LEGEND)


def plot_attention(
    ax: Any,
    pattern: torch.Tensor,
    tokens: Sequence[str],
    *,
    row: int | None = None,
    title: str | None = None,
) -> Any:
    """Heatmap of ``pattern`` ``(T, T)``: row ``i`` = query position, column ``j`` = key position.

    ``row`` outlines one query row and, in red, the cell of its answer (row ``i``, column
    ``i + 1``): a value > 0 there means the position can read the token it must predict.
    """
    toks = _check_tokens("tokens", tokens)
    weights = _check_pattern(pattern, len(toks))
    n = len(toks)
    vmax = max(1e-9, float(weights.max()))
    attention_axes(ax, weights.numpy(), vmax=vmax, row=row, title=title)
    ax.set_xticks(range(n), toks, rotation=90, fontsize=8)
    ax.set_yticks(range(n), toks, fontsize=8)
    if row is not None and row + 1 < n:
        ax.add_patch(Rectangle((row + 0.5, row - 0.5), 1, 1, fill=False, edgecolor="#d7191c", lw=2))
    return ax


def _heatmap_png(pattern: torch.Tensor, tokens: Sequence[str], row: int, title: str) -> bytes:
    """The heatmap as PNG bytes, its size following the number of tokens."""
    size = 1.6 + 0.22 * len(tokens)
    fig = new_figure(size, size)
    plot_attention(fig.add_subplot(), pattern, tokens, row=row, title=title)
    return figure_png(fig, crop=True)


def _outputs(marker: str, table: str, png: bytes | None, alt: str) -> tuple[OutputRecord, ...]:
    """The hidden state, the table, and the heatmap with ``alt`` as its text (the picture's alt)."""
    return view_outputs(marker, table, None if png is None else png_output(png, alt))


def _heatmap_alt(what: str, t: int, token: str, sees: int) -> str:
    """Words for the heatmap: what it shows and which row is outlined."""
    return (
        f"Heatmap of {what}: one row per query position, one column per key position; "
        f"row {t} (token {token}) is outlined and has weight on {sees} key position(s)"
    )


def _check_position(position: object, n: int) -> int:
    if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position < n:
        raise ValueError(f"position must be an int in [0, {n}), got {position!r}")
    return position


def _position_slider(n: int, position: int | None) -> widgets.IntSlider:
    position = _check_position(min(3, n - 1) if position is None else position, n)
    return widgets.IntSlider(
        value=position,
        min=0,
        max=n - 1,
        step=1,
        description="position",
        style={"description_width": "80px"},
        layout=widgets.Layout(width="420px"),
    )


def position_widget(
    tokens: Sequence[str],
    pattern: torch.Tensor | None = None,
    *,
    label_tokens: Sequence[str] | None = None,
    position: int | None = None,
    heatmap: bool = True,
) -> LessonWidget:
    """Lesson 03: a ``position`` slider over ``tokens``; the output shows which positions that
    one may attend to (in ``pattern``, default the causal mask) and the token it must predict,
    as a token table and a heatmap with its row outlined.

    The returned :class:`LessonWidget` carries ``.controls`` (``{"position": slider}``),
    ``.output`` and ``.redraw()`` for tests.
    """
    toks = _check_tokens("tokens", tokens)
    weights = (
        causal_mask(len(toks)).float() if pattern is None else _check_pattern(pattern, len(toks))
    )
    labels = None if label_tokens is None else _check_tokens("label_tokens", label_tokens)
    slider = _position_slider(len(toks), position)

    def draw() -> tuple[OutputRecord, ...]:
        t = int(slider.value)
        view = position_view(weights, toks, t, labels)
        table = position_table_html(
            toks,
            view,
            caption=f"position {t} ({toks[t]!r}) sees {view['sees']} "
            f"token(s) and must predict {view['predicts']!r}",
        )
        png = _heatmap_png(weights, toks, t, f"causal mask, row {t}") if heatmap else None
        alt = _heatmap_alt("the causal mask", t, toks[t], view["sees"])
        return _outputs(position_marker(view), table, png, alt)

    return LessonWidget({"position": slider}, draw)


def _check_patterns(patterns: object, length: int) -> dict[bool, torch.Tensor]:
    if not isinstance(patterns, Mapping) or set(patterns) != {True, False}:
        raise ValueError(
            "patterns must be a dict {True: (T, T) tensor, False: (T, T) tensor} keyed by "
            "is_decoder"
        )
    return {k: _check_pattern(v, length) for k, v in patterns.items()}


def _is_decoder_outputs(
    weights: torch.Tensor,
    toks: list[str],
    labels: list[str] | None,
    t: int,
    dec: bool,
    heatmap: bool,
) -> tuple[OutputRecord, ...]:
    view = position_view(weights, toks, t, labels)
    verdict = "it can read its answer: a leak" if view["sees_answer"] else "its answer is hidden"
    table = position_table_html(
        toks,
        view,
        caption=f"is_decoder={dec}: position {t} ({toks[t]!r}) sees "
        f"{view['sees']} token(s), must predict "
        f"{view['predicts']!r}; {verdict}",
    )
    png = _heatmap_png(weights, toks, t, f"attention, is_decoder={dec}") if heatmap else None
    alt = _heatmap_alt(f"the attention with is_decoder={dec}", t, toks[t], view["sees"])
    return _outputs(position_marker(view, is_decoder=dec), table, png, alt)


def is_decoder_widget(
    tokens: Sequence[str],
    patterns: Mapping[bool, torch.Tensor],
    *,
    label_tokens: Sequence[str] | None = None,
    position: int | None = None,
    is_decoder: bool = True,
    heatmap: bool = True,
) -> LessonWidget:
    """Lesson 04: a ``position`` slider (the first control) and an ``is_decoder`` toggle.

    ``patterns[True]`` / ``patterns[False]``: ``(T, T)`` attention probabilities measured on the
    same ``BertLMHeadModel`` weights built with ``is_decoder=True`` / ``False`` (see
    :func:`lmlessons.causality.attention_map`). The output shows the chosen pattern as a heatmap,
    what the position sees, what it must predict and whether it can read that answer.

    The returned :class:`LessonWidget` carries ``.controls`` (``{"position": ...,
    "is_decoder": ...}``), ``.output`` and ``.redraw()`` for tests.
    """
    toks = _check_tokens("tokens", tokens)
    weights = _check_patterns(patterns, len(toks))
    if not isinstance(is_decoder, bool):
        raise TypeError(f"is_decoder must be a bool, got {type(is_decoder).__name__}")
    labels = None if label_tokens is None else _check_tokens("label_tokens", label_tokens)
    controls = {
        "position": _position_slider(len(toks), position),
        "is_decoder": widgets.ToggleButtons(
            options=[("True (causal)", True), ("False (bidirectional)", False)],
            value=is_decoder,
            description="is_decoder",
            style={"description_width": "80px", "button_width": "150px"},
        ),
    }

    def draw() -> tuple[OutputRecord, ...]:
        t, dec = int(controls["position"].value), bool(controls["is_decoder"].value)
        return _is_decoder_outputs(weights[dec], toks, labels, t, dec, heatmap)

    return LessonWidget(controls, draw)


# ---------------------------------------------------------------------------------------------
# plots for the notebooks
# ---------------------------------------------------------------------------------------------


def plot_logit_change(
    ax: Any,
    changes: Mapping[str, torch.Tensor],
    position: int,
    tokens: Sequence[str] | None = None,
    *,
    log: bool = True,
) -> Any:
    """Grouped bars: per position, the largest logit change after replacing the token at
    ``position`` (one bar group per entry of ``changes``, e.g. ``is_decoder=True`` / ``False``).
    The replaced position is shaded; bars left of it are the future reaching the past.

    ``log=True`` (default) uses a log scale, so a tiny change is still a visible bar and a change
    of exactly 0 has no bar at all."""
    if not changes:
        raise ValueError("changes must hold at least one (T,) tensor")
    values = {k: torch.as_tensor(v).detach().float() for k, v in changes.items()}
    n = len(next(iter(values.values())))
    width = 0.8 / len(values)
    for i, (name, v) in enumerate(values.items()):
        ax.bar(
            [x + (i - (len(values) - 1) / 2) * width for x in range(n)],
            v.tolist(),
            width=width,
            label=name,
            color=f"C{i}",
        )
    ax.axvspan(
        position - 0.5,
        position + 0.5,
        color=COLORS["mask"],
        alpha=0.4,
        lw=0,
        label=f"replaced (position {position})",
    )
    if tokens is not None:
        ax.set_xticks(range(n), _check_tokens("tokens", tokens), rotation=90, fontsize=8)
    else:
        ax.set_xlabel("position")
    positive = [float(x) for v in values.values() for x in v.tolist() if x > 0]
    if log and positive:
        ax.set_yscale("log")
        ax.set_ylim(min(positive) / 3, max(positive) * 3)
        ax.set_ylabel("max |change of logits|\n(log scale; no bar = exactly 0)", fontsize=9)
    else:
        ax.set_ylabel("max |change of logits|")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return ax


def plot_loss_curves(
    ax: Any,
    curves: Mapping[str, Sequence[float]],
    *,
    reference: float | None = None,
    smooth: float = 0.9,
) -> Any:
    """Training-loss curves (raw, faint; smoothed with a bias-corrected moving average, bold).
    ``reference`` draws a dashed line, e.g. ``ln(vocab_size)``, the loss of uniform guessing."""
    if not curves:
        raise ValueError("curves must hold at least one list of losses")
    if not 0.0 <= smooth < 1.0:
        raise ValueError(f"smooth must be in [0, 1), got {smooth}")
    for i, (name, values) in enumerate(curves.items()):
        vals = [float(v) for v in values]
        steps = range(1, len(vals) + 1)
        ax.plot(steps, vals, color=f"C{i}", alpha=0.25, lw=1)
        ax.plot(steps, smoothed(vals, smooth), color=f"C{i}", lw=2, label=name)
    if reference is not None:
        ax.axhline(reference, color="gray", ls="--", lw=1, label=f"uniform guess = {reference:.2f}")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss (nats)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return ax
