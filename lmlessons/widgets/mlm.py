"""Lesson 02 (MLM loss): fill in [MASK] with a trained model, as numbers and as a bar chart.

:func:`fill_mask` returns the top-k tokens and probabilities at every [MASK] of a sentence (what
transformers' ``fill-mask`` pipeline does, without the pipeline). :func:`mlm_widget` is a Text box:
type a sentence with [MASK], press Enter, and see the predictions as bars; its callback writes a
hidden state ``masks=1 top1=ball text=the dog chased the [MASK] .`` for a browser test.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets
import torch

from lmlessons._checks import check_tokenizer
from lmlessons.widgets.base import LessonWidget
from lmlessons.widgets.display import (
    COLORS,
    OutputRecord,
    figure_png,
    new_figure,
    png_output,
    state_output,
    stream,
)

__all__ = [
    "normalize_mask_text",
    "fill_mask",
    "plot_top_k",
    "mlm_marker",
    "MaskFillWidget",
    "mlm_widget",
]

_MASK_ANY_CASE = re.compile(r"\[mask\]", re.IGNORECASE)


def normalize_mask_text(text: str, mask_token: str = "[MASK]") -> str:
    """Collapse white space and write every ``[mask]`` (any case) as the tokenizer's mask token:
    the tokenizer lower-cases words, but it only recognises its special tokens written exactly."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return " ".join(_MASK_ANY_CASE.sub(mask_token, text).split())


@torch.no_grad()
def fill_mask(
    model: Any, tokenizer: Any, text: str, *, top_k: int = 5
) -> list[list[tuple[str, float]]]:
    """For each [MASK] in ``text`` (left to right): the ``top_k`` most likely tokens and their
    probabilities (softmax over the whole vocabulary at that position).

    ``model``: a masked-LM (``BertForMaskedLM``; ``BertForPreTraining`` works too, through its
    ``prediction_logits``). The model is run in eval mode and left as it was.
    """
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be a positive int, got {top_k!r}")
    check_tokenizer(tokenizer, ("mask_token_id",))
    text = normalize_mask_text(text, tokenizer.mask_token)
    max_len = int(getattr(getattr(model, "config", None), "max_position_embeddings", 512))
    enc = tokenizer(text, truncation=True, max_length=max_len, return_tensors="pt")
    was_training = model.training
    model.eval()
    try:
        out = model(
            **{
                k: v
                for k, v in enc.items()
                if k in ("input_ids", "attention_mask", "token_type_ids")
            }
        )
    finally:
        model.train(was_training)
    logits = out.logits if hasattr(out, "logits") else out.prediction_logits  # (1, T, V)
    positions = (enc["input_ids"][0] == tokenizer.mask_token_id).nonzero().flatten().tolist()
    result = []
    for t in positions:
        probs = logits[0, t].float().softmax(-1)  # (V,)
        top = probs.topk(min(top_k, probs.numel()))
        tokens = tokenizer.convert_ids_to_tokens(top.indices.tolist())
        result.append([(tok, float(p)) for tok, p in zip(tokens, top.values.tolist())])
    return result


def plot_top_k(ax: Any, predictions: Sequence[tuple[str, float]], *, title: str = "") -> Any:
    """Horizontal bars of one [MASK]'s predictions, the most likely on top."""
    labels = [tok for tok, _ in predictions][::-1]
    values = [p for _, p in predictions][::-1]
    colors = [COLORS["mask"]] * len(values)
    if colors:
        colors[-1] = COLORS["kept"]  # the top-1 prediction
    ax.barh(range(len(values)), values, color=colors, edgecolor="#555")
    ax.set_yticks(range(len(values)), labels)
    for y, v in enumerate(values):
        ax.text(v + 0.01, y, f"{v:.3f}", va="center", fontsize=8)
    ax.set_xlim(0, min(1.0, max(0.05, 1.3 * max(values, default=0.0))))  # room for the labels
    ax.set_xlabel("probability")
    if title:
        ax.set_title(title, fontsize=9)
    return ax


def mlm_marker(text: str, predictions: Sequence[Sequence[tuple[str, float]]]) -> str:
    """The widget's state (hidden): number of masks, the top-1 token at each, and the text."""
    top1 = ",".join(p[0][0] for p in predictions if p)
    return f"masks={len(predictions)} top1={top1} text={text}"


def _figure_png(predictions: Sequence[Sequence[tuple[str, float]]], max_plots: int = 3) -> bytes:
    n = min(len(predictions), max_plots)
    fig = new_figure(3.2 * n, 2.2)
    axes = fig.subplots(1, n, squeeze=False)[0]
    for i, ax in enumerate(axes):
        plot_top_k(ax, predictions[i], title=f"[MASK] #{i + 1}")
    return figure_png(fig)


def _mlm_outputs(model: Any, tokenizer: Any, text: str, top_k: int) -> tuple[OutputRecord, ...]:
    typed = normalize_mask_text(text, tokenizer.mask_token)
    preds = fill_mask(model, tokenizer, typed, top_k=top_k)
    marker = state_output(mlm_marker(typed, preds))
    if not preds:
        return marker, stream(
            f"No {tokenizer.mask_token} in the sentence: write one where a word should be guessed."
        )
    lines = [
        f"[MASK] #{i + 1}: " + ", ".join(f"{tok} {p:.3f}" for tok, p in pred)
        for i, pred in enumerate(preds)
    ]
    return marker, png_output(_figure_png(preds), "\n".join(lines))


class MaskFillWidget(LessonWidget):
    """:func:`mlm_widget`'s box; ``.text`` is its Text widget (``controls["sentence"]``)."""

    @property
    def text(self) -> widgets.Text:
        return self.controls["sentence"]


def mlm_widget(
    model: Any,
    tokenizer: Any,
    *,
    text: str = "the dog chased the [MASK] across the park .",
    top_k: int = 5,
) -> MaskFillWidget:
    """A Text box (description ``sentence``): type a sentence with [MASK] and press Enter to see
    the model's top-k predictions at every [MASK] as a bar chart (up to three masks drawn).

    The returned :class:`MaskFillWidget` carries ``.text`` (the Text widget), ``.output`` and
    ``.redraw()``.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    box_text = widgets.Text(
        value=text,
        description="sentence",
        continuous_update=False,
        style={"description_width": "80px"},
        layout=widgets.Layout(width="640px"),
    )
    return MaskFillWidget(
        {"sentence": box_text}, lambda: _mlm_outputs(model, tokenizer, box_text.value, top_k)
    )
