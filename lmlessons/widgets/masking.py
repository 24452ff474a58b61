"""Lesson 01 (MLM masking): the masking widget and the lesson's plot helpers.

:func:`masking_widget` masks one tokenized sentence with :func:`lmlessons.mask_tokens` and draws
it as a coloured token table (special / [MASK] / random / kept) with the ``labels`` row beneath,
plus the rates measured over many draws next to the requested ones. Every redraw writes one
hidden state ``mlm_probability=0.15 ... selected=N mask=a random=b kept=c`` so a browser
test can check that moving a slider really re-ran the masking.

The widget is a :class:`~lmlessons.widgets.base.LessonWidget`: its output is replaced in one
assignment, so it works the same in a kernel and in plain pytest (no display hook needed).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets
import torch

from lmlessons._checks import IGNORE_INDEX, check_tokenizer
from lmlessons.course.palette import MUTED
from lmlessons.masking import mask_tokens
from lmlessons.widgets.base import LessonWidget, float_slider
from lmlessons.widgets.display import (
    COLORS,
    OutputRecord,
    token_table_html,
    view_outputs,
)

__all__ = [
    "CATEGORY_COLORS",
    "token_categories",
    "masking_table_html",
    "measure_rates",
    "masking_marker",
    "masking_widget",
    "binomial_pmf",
    "plot_masked_counts",
    "plot_replacement_rates",
]

#: The colour of each position's fate (the course palette of :mod:`lmlessons.widgets.display`).
CATEGORY_COLORS: dict[str, str | None] = {
    "special": COLORS["special"],
    "mask": COLORS["mask"],
    "random": COLORS["random"],
    "kept": COLORS["kept"],
    "plain": None,
}
_LEGEND = {
    "special ([CLS] [SEP] [PAD]: never selected)": COLORS["special"],
    "selected -> [MASK]": COLORS["mask"],
    "selected -> random token": COLORS["random"],
    "selected, kept": COLORS["kept"],
    "label -100 (no loss)": COLORS["ignored"],
    "label = original id": COLORS["target"],
}


def token_categories(
    input_ids: torch.Tensor,
    masked_input_ids: torch.Tensor,
    labels: torch.Tensor,
    special_tokens_mask: torch.Tensor,
    mask_token_id: int,
) -> list[str]:
    """The fate of each position of one sequence ``(T,)``: ``"special"``, ``"plain"`` (not
    selected), ``"mask"``, ``"random"`` or ``"kept"``.

    Read from the outside, as a learner can: a selected position that now holds [MASK] is
    "mask", one that holds its original token is "kept", anything else is "random". (A random
    draw that lands on the original token is indistinguishable from "kept", and for the model it
    *is* the same input.)
    """
    if input_ids.dim() != 1:
        raise ValueError(f"input_ids must be one sequence (T,), got shape {tuple(input_ids.shape)}")
    out = []
    for orig, new, lab, spec in zip(
        input_ids.tolist(), masked_input_ids.tolist(), labels.tolist(), special_tokens_mask.tolist()
    ):
        if spec:
            out.append("special")
        elif lab == IGNORE_INDEX:
            out.append("plain")
        elif new == mask_token_id:
            out.append("mask")
        elif new == orig:
            out.append("kept")
        else:
            out.append("random")
    return out


def masking_table_html(
    tokenizer: Any,
    input_ids: torch.Tensor,
    masked_input_ids: torch.Tensor,
    labels: torch.Tensor,
    special_tokens_mask: torch.Tensor,
    *,
    caption: str | None = None,
) -> str:
    """A token table of one sequence: the original tokens, the model's input (coloured by fate)
    and the ``labels`` row (the original id where selected, -100 elsewhere)."""
    cats = token_categories(
        input_ids, masked_input_ids, labels, special_tokens_mask, tokenizer.mask_token_id
    )
    rows = {
        "original": tokenizer.convert_ids_to_tokens(input_ids.tolist()),
        "input_ids (model sees)": tokenizer.convert_ids_to_tokens(masked_input_ids.tolist()),
        "labels": labels.tolist(),
    }
    colors: dict[str, list[str | None]] = {
        "input_ids (model sees)": [CATEGORY_COLORS[c] for c in cats],
        "labels": [
            COLORS["target"] if lab != IGNORE_INDEX else COLORS["ignored"]
            for lab in labels.tolist()
        ],
    }
    return token_table_html(rows, colors=colors, caption=caption, legend=_LEGEND)


def measure_rates(
    input_ids: torch.Tensor,
    special_tokens_mask: torch.Tensor,
    *,
    mask_token_id: int,
    vocab_size: int,
    mlm_probability: float,
    mask_replace_prob: float,
    random_replace_prob: float,
    n_draws: int = 2000,
    seed: int = 0,
) -> dict[str, float]:
    """Mask the sequence ``(T,)`` ``n_draws`` times and measure the rates.

    Returns ``selected`` (share of the eligible positions selected) and ``mask``, ``random``,
    ``kept`` (shares of the selected positions), plus the counts ``n_eligible`` and
    ``n_selected``.
    """
    if n_draws < 1:
        raise ValueError(f"n_draws must be >= 1, got {n_draws}")
    ids = input_ids.reshape(1, -1).expand(n_draws, -1)  # (N, T)
    special = special_tokens_mask.reshape(1, -1).expand(n_draws, -1)
    masked, labels = mask_tokens(
        ids,
        mask_token_id=mask_token_id,
        vocab_size=vocab_size,
        special_tokens_mask=special,
        mlm_probability=mlm_probability,
        mask_replace_prob=mask_replace_prob,
        random_replace_prob=random_replace_prob,
        generator=torch.Generator().manual_seed(seed),
    )
    sel = labels != IGNORE_INDEX
    n_eligible = int((~special.bool()).sum())
    n_sel = int(sel.sum())
    n_mask = int((sel & (masked == mask_token_id)).sum())
    n_kept = int((sel & (masked == ids) & (ids != mask_token_id)).sum())
    n_random = n_sel - n_mask - n_kept
    denom = max(n_sel, 1)
    return {
        "selected": n_sel / max(n_eligible, 1),
        "mask": n_mask / denom,
        "random": n_random / denom,
        "kept": n_kept / denom,
        "n_eligible": float(n_eligible),
        "n_selected": float(n_sel),
    }


def masking_marker(
    *,
    mlm_probability: float,
    mask_replace_prob: float,
    random_replace_prob: float,
    seed: int,
    sentence: int,
    categories: Sequence[str],
) -> str:
    """The widget's state (hidden) for a browser test (deterministic: no times, no addresses)."""
    n = {c: sum(1 for x in categories if x == c) for c in ("mask", "random", "kept")}
    selected = n["mask"] + n["random"] + n["kept"]
    return (
        f"mlm_probability={mlm_probability:.2f} mask_replace_prob={mask_replace_prob:.2f} "
        f"random_replace_prob={random_replace_prob:.2f} seed={seed} sentence={sentence} "
        f"selected={selected} mask={n['mask']} random={n['random']} kept={n['kept']}"
    )


def _rates_html(measured: dict[str, float], requested: dict[str, float], n_draws: int) -> str:
    rows = [
        ("selected (of eligible tokens)", "mlm_probability", "selected"),
        ("[MASK] (of selected)", "mask_replace_prob", "mask"),
        ("random (of selected)", "random_replace_prob", "random"),
        ("kept (of selected)", "1 - mask - random", "kept"),
    ]
    cell = "padding:2px 8px;border:1px solid #bbb;font-family:monospace;text-align:right"
    head = "".join(
        f'<th style="{cell}">{h}</th>'
        for h in ("", "requested", f"measured over {n_draws:,} draws")
    )
    body = "".join(
        f'<tr><th style="{cell};text-align:left">{html.escape(label)}</th>'
        f'<td style="{cell}">{requested[key]:.3f} '
        f'<span style="{MUTED}">({html.escape(arg)})</span></td>'
        f'<td style="{cell}">{measured[key]:.3f}</td></tr>'
        for label, arg, key in rows
    )
    note = (
        f'<div style="font-size:11px;{MUTED}">{int(measured["n_selected"]):,} selected of '
        f"{int(measured['n_eligible']):,} eligible positions; the measured shares move towards the "
        "requested ones as the number of draws grows (law of large numbers).</div>"
    )
    table = '<table style="border-collapse:collapse;font-size:12px;margin:4px 0">'
    return f"{table}{head}{body}</table>{note}"


def _label(i: int, sentence: str, width: int = 60) -> str:
    short = sentence if len(sentence) <= width else sentence[: width - 3] + "..."
    return f"{i}: {short}"


def _check_widget_args(tokenizer: Any, sentences: object, n_draws: object) -> Sequence[str]:
    if isinstance(sentences, str) or not isinstance(sentences, Sequence) or not sentences:
        raise ValueError("sentences must be a non-empty list of strings")
    if not all(isinstance(s, str) and s.strip() for s in sentences):
        raise TypeError("sentences must hold non-empty strings")
    check_tokenizer(tokenizer, ("mask_token_id", "all_special_ids", "convert_ids_to_tokens"))
    if isinstance(n_draws, bool) or not isinstance(n_draws, int) or n_draws < 1:
        raise ValueError(f"n_draws must be a positive int, got {n_draws!r}")
    return sentences


_STYLE = {"description_width": "150px"}


def _masking_controls(
    sentences: Sequence[str], probs: dict[str, float], seed: int
) -> dict[str, widgets.ValueWidget]:
    """The sliders (``mlm_probability`` first) and the sentence chooser, by name."""
    layout = widgets.Layout(width="420px")
    controls = {
        name: float_slider(name, value, 1.0, step=0.05, style=_STYLE, layout=layout)
        for name, value in probs.items()
    }
    controls["random_replace_prob"].max = round(1.0 - probs["mask_replace_prob"], 2)
    controls["seed"] = widgets.IntSlider(
        value=seed,
        min=0,
        max=99,
        step=1,
        description="seed",
        style=_STYLE,
        layout=layout,
    )
    controls["sentence"] = widgets.Dropdown(
        options=[(_label(i, s), i) for i, s in enumerate(sentences)],
        value=0,
        description="sentence",
        style=_STYLE,
        layout=widgets.Layout(width="640px"),
    )
    return controls


def _masking_outputs(
    tokenizer: Any,
    ids: torch.Tensor,
    sentence: int,
    probs: dict[str, float],
    seed: int,
    n_draws: int,
) -> tuple[OutputRecord, ...]:
    """One draw of sentence ``ids`` ``(T,)`` as a table, the rates over ``n_draws``, the marker."""
    special = torch.isin(ids, torch.tensor(sorted(set(tokenizer.all_special_ids))))  # (T,)
    ids_kw = {"mask_token_id": tokenizer.mask_token_id, "vocab_size": len(tokenizer), **probs}
    masked, labels = mask_tokens(
        ids.unsqueeze(0),
        special_tokens_mask=special.unsqueeze(0),  # [CLS], [SEP] are never selected
        generator=torch.Generator().manual_seed(seed),
        **ids_kw,
    )
    cats = token_categories(ids, masked[0], labels[0], special, tokenizer.mask_token_id)
    measured = measure_rates(ids, special, n_draws=n_draws, seed=seed, **ids_kw)
    requested = {
        "selected": probs["mlm_probability"],
        "mask": probs["mask_replace_prob"],
        "random": probs["random_replace_prob"],
        "kept": max(0.0, 1.0 - probs["mask_replace_prob"] - probs["random_replace_prob"]),
    }
    caption = f"sentence {sentence}, seed {seed}: one draw"
    table = masking_table_html(tokenizer, ids, masked[0], labels[0], special, caption=caption)
    marker = masking_marker(**probs, seed=seed, sentence=sentence, categories=cats)
    return view_outputs(marker, table + _rates_html(measured, requested, n_draws))


def masking_widget(
    tokenizer: Any,
    sentences: Sequence[str],
    *,
    mlm_probability: float = 0.15,
    mask_replace_prob: float = 0.8,
    random_replace_prob: float = 0.1,
    seed: int = 0,
    n_draws: int = 2000,
) -> LessonWidget:
    """Sliders for ``mlm_probability`` (the first slider), ``mask_replace_prob``,
    ``random_replace_prob`` and ``seed``, a sentence chooser, and an output that redraws the
    masked sentence as a token table with its labels and the requested vs measured rates.

    The returned :class:`LessonWidget` carries ``.controls`` (the control widgets by name),
    ``.output`` (the Output) and ``.redraw()`` for tests.
    """
    sentences = _check_widget_args(tokenizer, sentences, n_draws)
    encoded = [torch.tensor(tokenizer(s, truncation=True)["input_ids"]) for s in sentences]
    probs = {
        "mlm_probability": mlm_probability,
        "mask_replace_prob": mask_replace_prob,
        "random_replace_prob": random_replace_prob,
    }
    controls = _masking_controls(sentences, probs, seed)

    def on_mask_prob(change: dict[str, Any]) -> None:
        # mask + random must stay <= 1: shrinking the random slider's max clamps its value
        controls["random_replace_prob"].max = round(1.0 - float(change["new"]), 2)

    def draw() -> tuple[OutputRecord, ...]:
        now = {name: float(controls[name].value) for name in probs}
        # the slider's max keeps random <= 1 - mask; min() guards the float rounding
        now["random_replace_prob"] = min(now["random_replace_prob"], 1.0 - now["mask_replace_prob"])
        i, s = int(controls["sentence"].value), int(controls["seed"].value)
        return _masking_outputs(tokenizer, encoded[i], i, now, s, n_draws)

    controls["mask_replace_prob"].observe(on_mask_prob, names="value")  # before any redraw
    return LessonWidget(controls, draw)


# ---------------------------------------------------------------------------------------------
# plots
# ---------------------------------------------------------------------------------------------


def binomial_pmf(n: int, p: float) -> list[float]:
    """P(K = k) for k = 0..n, K ~ Binomial(n, p) (exact, with ``math.comb``)."""
    if n < 0 or not 0.0 <= p <= 1.0:
        raise ValueError(f"need n >= 0 and p in [0, 1], got n={n}, p={p}")
    return [math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)]


def plot_masked_counts(
    ax: Any,
    bernoulli_counts: Sequence[int],
    exact_counts: Sequence[int] | None,
    *,
    n: int,
    p: float,
) -> Any:
    """Histogram of targets per sequence over many draws (Bernoulli selection) against
    Binomial(``n``, ``p``), and the exact-count selection as a single bar."""
    counts = torch.as_tensor(list(bernoulli_counts))
    hi = max(int(counts.max()), int(n * p * 2) + 3)
    freq = torch.bincount(counts, minlength=hi + 1).double() / len(counts)
    ks = list(range(hi + 1))
    ax.bar(
        ks,
        freq.tolist(),
        width=0.8,
        color=COLORS["mask"],
        edgecolor="#888",
        label="Bernoulli: measured",
    )
    pmf = binomial_pmf(n, p)
    ax.plot(
        ks,
        [pmf[k] if k <= n else 0.0 for k in ks],
        "o-",
        color="#333",
        ms=4,
        lw=1,
        label=f"Binomial({n}, {p:g})",
    )
    if exact_counts is not None:
        ex = torch.as_tensor(list(exact_counts))
        values, number = torch.unique(ex, return_counts=True)
        if len(values) == 1:  # one sentence: every draw has the same count, a line says it best
            ax.axvline(
                float(values[0]),
                color=COLORS["random"],
                lw=3,
                ls="--",
                label=f"exact count (Google BERT): {int(values[0])} in every draw",
            )
        else:
            ax.bar(
                values.tolist(),
                (number.double() / len(ex)).tolist(),
                width=0.35,
                color=COLORS["random"],
                edgecolor="#333",
                label="exact count (Google BERT)",
            )
    ax.set_xlabel("number of selected tokens in the sequence")
    ax.set_ylabel("share of draws")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return ax


def plot_replacement_rates(ax: Any, measured: dict[str, float], requested: dict[str, float]) -> Any:
    """Side-by-side bars: requested vs measured shares of [MASK] / random / kept."""
    keys = ["mask", "random", "kept"]
    xs = range(len(keys))
    ax.bar(
        [x - 0.2 for x in xs],
        [requested[k] for k in keys],
        width=0.4,
        color="#cccccc",
        edgecolor="#555",
        label="requested",
    )
    ax.bar(
        [x + 0.2 for x in xs],
        [measured[k] for k in keys],
        width=0.4,
        color=[COLORS["mask"], COLORS["random"], COLORS["kept"]],
        edgecolor="#555",
        label="measured",
    )
    for x, k in zip(xs, keys):
        ax.text(x + 0.2, measured[k] + 0.01, f"{measured[k]:.3f}", ha="center", fontsize=8)
    ax.set_xticks(list(xs), ["[MASK]", "random token", "kept"])
    ax.set_ylabel("share of selected tokens")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    return ax
