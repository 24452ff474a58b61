"""Lesson 07 (the loss at scale): how big the logits are, and what chunking saves.

:func:`estimate_peak_bytes` is the memory model the lesson checks against measurements:

* dense head + loss (``F.linear`` then cross-entropy), forward + backward, float32: three
  ``(N, V)`` tensors are alive at the peak (the log-softmax output saved for backward, the
  gradient coming out of ``nll_loss`` and the gradient of the logits), so about ``3 N V`` values;
* :func:`lmlessons.linear_cross_entropy`: one ``(min(chunk_size, M), V)`` buffer, where ``M`` is
  the number of labelled rows, plus the gradients, which have the size of the inputs.

Both add the gradients of the hidden states, the weight and the bias. ``scale_widget`` turns the
model into a widget (vocabulary size and chunk size); its output starts with the deterministic
hidden state ``vocab_size=32000 chunk_size=1024 peak_MiB=... dense_MiB=...`` that a
browser test can wait for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets

from lmlessons._checks import check_int
from lmlessons.course.memory import MIB
from lmlessons.widgets.base import LessonWidget
from lmlessons.widgets.display import (
    OutputRecord,
    figure_png,
    new_figure,
    png_output,
    state_output,
)

__all__ = [
    "REAL_VOCABULARIES",
    "CHUNK_SIZES",
    "logits_bytes",
    "estimate_peak_bytes",
    "plot_logits_memory",
    "plot_peak_vs_chunk",
    "scale_marker",
    "ScaleWidget",
    "scale_widget",
]

GIB = 2**30

# Vocabulary sizes of real models (from their published configs / tokenizers).
REAL_VOCABULARIES: dict[str, int] = {
    "BERT-base (30,522)": 30522,
    "Llama 2 (32,000)": 32000,
    "GPT-2 (50,257)": 50257,
    "Llama 3 (128,256)": 128256,
    "Gemma (256,000)": 256000,
}
CHUNK_SIZES: tuple[int, ...] = tuple(2**k for k in range(6, 15))  # 64 ... 16,384 rows
TOKENS_PER_BATCH: tuple[int, ...] = tuple(2**k for k in range(10, 21))  # 1,024 ... 1,048,576


def _pos_int(name: str, value: object) -> int:
    return check_int(name, value, minimum=1)


def logits_bytes(
    batch_size: int, seq_len: int, vocab_size: int, *, bytes_per_value: int = 4
) -> int:
    """Bytes of one ``(B, T, V)`` logits tensor: ``B * T * V * bytes_per_value`` (4 for float32)."""
    for name, v in (
        ("batch_size", batch_size),
        ("seq_len", seq_len),
        ("vocab_size", vocab_size),
        ("bytes_per_value", bytes_per_value),
    ):
        _pos_int(name, v)
    return batch_size * seq_len * vocab_size * bytes_per_value


def estimate_peak_bytes(
    n_rows: int,
    hidden_size: int,
    vocab_size: int,
    *,
    chunk_size: int | None = None,
    labelled_rows: int | None = None,
    bias: bool = False,
    bytes_per_value: int = 4,
) -> int:
    """Memory added at the peak of one forward + backward of the output layer and its loss.

    ``chunk_size=None``: the dense head (``3 * N * V`` values). Otherwise
    :func:`lmlessons.linear_cross_entropy`: ``min(chunk_size, labelled_rows) * V`` values.
    ``labelled_rows`` (default: all ``n_rows``) is the number of labels that are not -100. Both
    add the gradients of hidden states (``N * H``), weight (``V * H``) and bias (``V``).
    """
    n_rows = _pos_int("n_rows", n_rows)
    hidden_size = _pos_int("hidden_size", hidden_size)
    vocab_size = _pos_int("vocab_size", vocab_size)
    bytes_per_value = _pos_int("bytes_per_value", bytes_per_value)
    if labelled_rows is None:
        labelled_rows = n_rows
    if (
        isinstance(labelled_rows, bool)
        or not isinstance(labelled_rows, int)
        or not 0 <= labelled_rows <= n_rows
    ):
        raise ValueError(
            f"labelled_rows must be an int in [0, n_rows={n_rows}], got {labelled_rows!r}"
        )
    grads = n_rows * hidden_size + vocab_size * hidden_size + (vocab_size if bias else 0)
    if chunk_size is None:
        values = 3 * n_rows * vocab_size
    else:
        values = min(_pos_int("chunk_size", chunk_size), labelled_rows) * vocab_size
    return (values + grads) * bytes_per_value


def plot_logits_memory(
    ax: Any,
    *,
    vocabularies: dict[str, int] | None = None,
    tokens: Sequence[int] = TOKENS_PER_BATCH,
    budget_gib: float | None = 24.0,
) -> Any:
    """Float32 logits size (GiB) against tokens per batch (B x T), one line per vocabulary."""
    vocabularies = REAL_VOCABULARIES if vocabularies is None else vocabularies
    xs = list(tokens)
    for label, v in vocabularies.items():
        ax.plot(xs, [logits_bytes(1, n, v) / GIB for n in xs], marker="o", ms=3, label=label)
    if budget_gib is not None:
        ax.axhline(budget_gib, color="k", ls="--", lw=1)
        ax.text(xs[0], budget_gib * 1.15, f"{budget_gib:g} GiB of memory", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tokens per batch (B x T)")
    ax.set_ylabel("float32 logits (GiB)")
    ax.set_title("B x T x V x 4 bytes")
    ax.legend(fontsize=7)
    return ax


def _plot_measured(ax: Any, measured: dict[int | None, float], dense_x: int) -> None:
    """Measured MiB as points: chunk sizes as crosses, the dense head (key ``None``) at
    ``dense_x``."""
    pts = [(c, m) for c, m in measured.items() if c is not None]
    if pts:
        ax.plot(
            [c for c, _ in pts],
            [m for _, m in pts],
            marker="x",
            ms=8,
            ls="none",
            color="k",
            label="chunked (measured)",
        )
    if None in measured:
        ax.plot(
            [dense_x],
            [measured[None]],
            marker="+",
            ms=12,
            ls="none",
            color="C3",
            label="dense (measured)",
        )


def plot_peak_vs_chunk(
    ax: Any,
    n_rows: int,
    hidden_size: int,
    vocab_size: int,
    *,
    chunk_sizes: Sequence[int] = CHUNK_SIZES,
    current: int | None = None,
    measured: dict[int | None, float] | None = None,
    labelled_rows: int | None = None,
) -> Any:
    """Estimated peak MiB of linear_cross_entropy against chunk size, and the dense line.

    ``measured`` maps chunk sizes (``None`` = dense) to measured MiB, drawn as points.
    """

    def mib(chunk_size: int | None) -> float:
        peak = estimate_peak_bytes(
            n_rows, hidden_size, vocab_size, chunk_size=chunk_size, labelled_rows=labelled_rows
        )
        return peak / MIB

    cs = [c for c in chunk_sizes if c <= n_rows] or [n_rows]
    ax.plot(cs, [mib(c) for c in cs], marker="o", ms=3, label="chunked (estimate)")
    ax.axhline(mib(None), color="C3", ls="--", label="dense (estimate)")
    if current is not None:
        ax.plot(
            [current],
            [mib(current)],
            marker="*",
            ms=12,
            color="C1",
            ls="none",
            label=f"chunk_size={current}",
        )
    if measured:
        _plot_measured(ax, measured, cs[-1])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("chunk_size (rows)")
    ax.set_ylabel("peak MiB above inputs")
    ax.set_title(f"N={n_rows:,} rows, H={hidden_size}, V={vocab_size:,}")
    ax.legend(fontsize=7)
    return ax


def scale_marker(vocab_size: int, chunk_size: int, peak_mib: float, dense_mib: float) -> str:
    """The widget's deterministic state (hidden)."""
    return (
        f"vocab_size={vocab_size} chunk_size={chunk_size} "
        f"peak_MiB={peak_mib:.0f} dense_MiB={dense_mib:.0f}"
    )


def _figure_png(n_rows: int, hidden_size: int, vocab_size: int, chunk_size: int) -> bytes:
    fig = new_figure(5.2, 3.0)
    plot_peak_vs_chunk(fig.subplots(), n_rows, hidden_size, vocab_size, current=chunk_size)
    return figure_png(fig)


def _scale_outputs(n_rows: int, hidden_size: int, v: int, c: int) -> tuple[OutputRecord, ...]:
    """The hidden state, then the chart with the three numbers as its text form."""
    peak = estimate_peak_bytes(n_rows, hidden_size, v, chunk_size=c) / MIB
    dense = estimate_peak_bytes(n_rows, hidden_size, v) / MIB
    logits = logits_bytes(1, n_rows, v) / MIB
    text = "\n".join(
        [
            f"{n_rows:,} tokens x V={v:,}: one float32 logits tensor is {logits:,.0f} MiB",
            f"dense head + loss, forward + backward: ~{dense:,.0f} MiB "
            "(three (N, V) tensors + gradients)",
            f"linear_cross_entropy, chunk_size={c:,}: ~{peak:,.0f} MiB "
            f"({peak / dense:.1%} of dense)",
        ]
    )
    png = _figure_png(n_rows, hidden_size, v, c)
    return state_output(scale_marker(v, c, peak, dense)), png_output(png, text)


def _selection_slider(
    name: str, options: list[tuple[str, int]], value: int
) -> widgets.SelectionSlider:
    return widgets.SelectionSlider(
        options=options,
        value=value,
        description=name,
        continuous_update=False,
        style={"description_width": "90px"},
        layout=widgets.Layout(width="520px"),
    )


class ScaleWidget(LessonWidget):
    """:func:`scale_widget`'s box; ``.vocab`` and ``.chunk`` are its two sliders."""

    @property
    def vocab(self) -> widgets.SelectionSlider:
        return self.controls["vocab_size"]

    @property
    def chunk(self) -> widgets.SelectionSlider:
        return self.controls["chunk_size"]


def scale_widget(
    *,
    n_rows: int = 16384,
    hidden_size: int = 2048,
    vocab_size: int = 32000,
    chunk_size: int = 1024,
    vocabularies: dict[str, int] | None = None,
) -> ScaleWidget:
    """Two sliders (``vocab_size`` over real vocabularies, ``chunk_size`` over powers of two) and
    the estimated peak memory of the dense head against :func:`lmlessons.linear_cross_entropy`
    for ``n_rows`` tokens (default 8 x 2,048) and hidden size ``hidden_size``.

    The returned :class:`ScaleWidget` carries ``.vocab``, ``.chunk`` (the sliders), ``.output``
    and ``.redraw()``; set ``box.vocab.value = 128256`` in a test to run the callback.
    """
    n_rows = _pos_int("n_rows", n_rows)
    hidden_size = _pos_int("hidden_size", hidden_size)
    vocabularies = dict(REAL_VOCABULARIES if vocabularies is None else vocabularies)
    if vocab_size not in vocabularies.values():
        vocabularies[f"{vocab_size:,}"] = _pos_int("vocab_size", vocab_size)
    if chunk_size not in CHUNK_SIZES:
        raise ValueError(f"chunk_size must be one of {list(CHUNK_SIZES)}, got {chunk_size!r}")
    options = sorted(vocabularies.items(), key=lambda kv: kv[1])
    controls = {
        "vocab_size": _selection_slider("vocab_size", options, vocab_size),
        "chunk_size": _selection_slider(
            "chunk_size", [(f"{c:,}", c) for c in CHUNK_SIZES], chunk_size
        ),
    }

    def draw() -> tuple[OutputRecord, ...]:
        v, c = controls["vocab_size"].value, controls["chunk_size"].value
        return _scale_outputs(n_rows, hidden_size, v, c)

    return ScaleWidget(controls, draw)
