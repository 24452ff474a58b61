"""Lesson 05 (NSP pairs): the pair browser and the lesson's table and plot helpers.

:func:`nsp_pair_widget` builds next-sentence-prediction pairs with :func:`lmlessons.make_nsp_pairs`
from tokenized documents and shows one of them as a token table: segment A and segment B in
their own colours, the special tokens in grey, with ``token_type_ids`` and ``attention_mask``
beneath, the ``next_sentence_label`` and the decoded text. Its first slider is
``nsp_probability`` (the pairs are rebuilt with the same seed when it moves), the second picks
the pair. Every redraw writes one hidden state, e.g.
``nsp_probability=0.50 pair=0 label=IsNext notnext_rate=0.48``, so a browser test can
check that moving the slider really rebuilt the pairs.

The widget is a :class:`~lmlessons.widgets.base.LessonWidget`: its output is replaced in one
assignment, so it works the same in a kernel and in plain pytest.
"""

from __future__ import annotations

import bisect
import html
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ipywidgets as widgets
import torch

from lmlessons._checks import check_int, check_probability, check_tokenizer
from lmlessons.course.batches import pair_token_ids
from lmlessons.course.palette import on_color
from lmlessons.pairs import make_nsp_pairs
from lmlessons.widgets.base import LessonWidget, float_slider
from lmlessons.widgets.display import (
    COLORS,
    OutputRecord,
    html_output,
    state_output,
    token_table_html,
)

__all__ = [
    "LABEL_NAMES",
    "DocumentIndex",
    "label_name",
    "pair_segments",
    "segment_colors",
    "pair_table_html",
    "nsp_marker",
    "PairBrowser",
    "nsp_pair_widget",
]

#: ``next_sentence_label`` values in BERT and transformers (d2l.ai uses the opposite).
LABEL_NAMES: dict[int, str] = {0: "IsNext", 1: "NotNext"}

_LEGEND = {
    "special ([CLS] [SEP])": COLORS["special"],
    "segment A (token_type_ids = 0)": COLORS["segment_a"],
    "segment B (token_type_ids = 1)": COLORS["segment_b"],
    "padding (attention_mask = 0)": COLORS["ignored"],
}


def label_name(label: int) -> str:
    """``0 -> "IsNext"``, ``1 -> "NotNext"`` (BERT's ``next_sentence_label``)."""
    label = check_int("label", label)
    if label not in LABEL_NAMES:
        raise ValueError(f"label must be 0 (IsNext) or 1 (NotNext), got {label}")
    return LABEL_NAMES[label]


class DocumentIndex:
    """Which documents contain a segment (a contiguous run of token ids)?

    ``make_nsp_pairs`` returns tensors only; this index recovers where segment A and segment B of
    a pair came from (and so their topics), by searching each document's token stream (its
    sentences concatenated). A very short segment can occur in several documents: all are listed.
    """

    def __init__(self, token_documents: Sequence[Sequence[Sequence[int]]]) -> None:
        parts, starts, pos = [], [], 0
        for doc in token_documents:
            text = "," + ",".join(str(t) for sent in doc for t in sent) + ",|"
            starts.append(pos)
            parts.append(text)
            pos += len(text)
        if not parts:
            raise ValueError("token_documents must hold at least one document")
        self._text = "".join(parts)
        self._starts = starts

    def find(self, segment: Sequence[int]) -> list[int]:
        """Indices of the documents whose token stream contains ``segment``, in order."""
        if len(segment) == 0:
            raise ValueError("segment must hold at least one token id")
        needle = "," + ",".join(str(int(t)) for t in segment) + ","
        found: list[int] = []
        at = self._text.find(needle)
        while at != -1:
            doc = bisect.bisect_right(self._starts, at) - 1
            if not found or found[-1] != doc:
                found.append(doc)
            at = self._text.find(needle, at + 1)
        return found


def _row(pairs: Mapping[str, torch.Tensor], index: int) -> tuple[list[int], list[int], list[int]]:
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        if key not in pairs:
            raise ValueError(
                f"pairs must hold {key!r} (the output of make_nsp_pairs / make_sop_pairs)"
            )
    n = pairs["input_ids"].shape[0]
    index = check_int("index", index)
    if not 0 <= index < n:
        raise ValueError(f"index must be in [0, {n}), got {index}")
    return (
        pairs["input_ids"][index].tolist(),
        pairs["token_type_ids"][index].tolist(),
        pairs["attention_mask"][index].tolist(),
    )


def pair_segments(pairs: Mapping[str, torch.Tensor], index: int) -> tuple[list[int], list[int]]:
    """The token ids of segment A and segment B of row ``index`` (no special tokens, no padding).

    Read from ``token_type_ids`` and ``attention_mask`` alone: A is everything between [CLS] and
    the first [SEP] (type 0), B the type-1 tokens before the last [SEP].
    """
    ids, types, mask = _row(pairs, index)
    n = sum(mask)
    a = [t for t, ty in zip(ids[1:n], types[1:n]) if ty == 0][:-1]  # drop A's [SEP]
    b = [t for t, ty in zip(ids[:n], types[:n]) if ty == 1][:-1]  # drop B's [SEP]
    return a, b


def segment_colors(pairs: Mapping[str, torch.Tensor], index: int) -> list[str]:
    """One colour per position of row ``index``: special, segment A, segment B or padding."""
    ids, types, mask = _row(pairs, index)
    n = sum(mask)
    a_len = len(pair_segments(pairs, index)[0])
    colors = []
    for j in range(len(ids)):
        if j >= n:
            colors.append(COLORS["ignored"])
        elif j == 0 or j == a_len + 1 or j == n - 1:
            colors.append(COLORS["special"])
        else:
            colors.append(COLORS["segment_a"] if types[j] == 0 else COLORS["segment_b"])
    return colors


def pair_table_html(
    tokenizer: Any,
    pairs: Mapping[str, torch.Tensor],
    index: int,
    *,
    show_padding: bool = True,
    show_ids: bool = False,
    label_key: str = "next_sentence_label",
    caption: str | None = None,
) -> str:
    """A token table of one pair: tokens coloured by segment, then ``token_type_ids`` and
    ``attention_mask`` (and ``input_ids`` with ``show_ids=True``). The caption names the label
    (``label_key``: ``"next_sentence_label"`` or ``"sentence_order_label"``)."""
    ids, types, mask = _row(pairs, index)
    width = len(ids) if show_padding else sum(mask)
    colors = segment_colors(pairs, index)[:width]
    rows: dict[str, Sequence[object]] = {"token": tokenizer.convert_ids_to_tokens(ids[:width])}
    if show_ids:
        rows["input_ids"] = ids[:width]
    rows["token_type_ids"] = types[:width]
    rows["attention_mask"] = mask[:width]
    if caption is None and label_key in pairs:
        label = int(pairs[label_key][index])
        meaning = (
            label_name(label)
            if label_key == "next_sentence_label"
            else ("swapped" if label else "in order")
        )
        caption = f"pair {index}: {label_key} = {label} ({meaning})"
    return token_table_html(rows, column_colors=colors, caption=caption, legend=_LEGEND)


def nsp_marker(nsp_probability: float, pair: int, label: int, notnext_rate: float) -> str:
    """The widget's deterministic state line (what a browser test waits for)."""
    return (
        f"nsp_probability={nsp_probability:.2f} pair={pair} label={label_name(label)} "
        f"notnext_rate={notnext_rate:.2f}"
    )


def _text_html(tokenizer: Any, a: Sequence[int], b: Sequence[int]) -> str:
    def span(ids: Sequence[int], color: str, name: str) -> str:
        text = html.escape(tokenizer.decode(list(ids)))
        return (
            f'<div style="margin:2px 0"><b>{name}</b> '
            f'<span style="{on_color(color)}padding:1px 4px">{text}</span></div>'
        )

    return span(a, COLORS["segment_a"], "A:") + span(b, COLORS["segment_b"], "B:")


def _source(index: DocumentIndex, topics: Sequence[str] | None, segment: Sequence[int]) -> str:
    """Where ``segment`` came from, e.g. ``document 3 (cooking)`` (at most three listed)."""
    docs = index.find(segment)
    if not docs:
        return "not found"
    names = [f"{d} ({topics[d]})" if topics is not None else str(d) for d in docs[:3]]
    more = f" and {len(docs) - 3} more" if len(docs) > 3 else ""
    return ("document " if len(docs) == 1 else "documents ") + ", ".join(names) + more


def _summary_html(labels: torch.Tensor, label: int, nsp_probability: float) -> str:
    n_pairs, n_notnext = labels.numel(), int(labels.sum())
    meaning = (
        "B is the text that follows A in its document."
        if label == 0
        else "B comes from another document."
    )
    return (
        f'<div style="font-size:12px">{n_pairs} pairs built with nsp_probability = '
        f"{nsp_probability:.2f}: {n_notnext} NotNext ({labels.float().mean().item():.2f}), "
        f"{n_pairs - n_notnext} IsNext. "
        f"<b>next_sentence_label = {label} ({label_name(label)})</b>: {meaning}</div>"
    )


def _browser_outputs(
    tokenizer: Any,
    pairs: Mapping[str, torch.Tensor],
    row: int,
    nsp_probability: float,
    source: Callable[[Sequence[int]], str],
) -> tuple[OutputRecord, ...]:
    """The pair's table, its text and sources, the label summary, then the hidden state."""
    labels = pairs["next_sentence_label"]
    label = int(labels[row])
    a, b = pair_segments(pairs, row)
    where = (
        f'<div style="font-size:12px">A from {html.escape(source(a))}; '
        f"B from {html.escape(source(b))}</div>"
    )
    body = (
        pair_table_html(tokenizer, pairs, row, show_padding=False)
        + _text_html(tokenizer, a, b)
        + where
        + _summary_html(labels, label, nsp_probability)
    )
    marker = nsp_marker(nsp_probability, row, label, labels.float().mean().item())
    return html_output(body, plain=marker), state_output(marker)


def _check_browser_args(
    token_documents: Sequence[Sequence[Sequence[int]]],
    tokenizer: Any,
    topics: Sequence[str] | None,
) -> None:
    check_tokenizer(tokenizer, ("cls_token_id", "sep_token_id", "pad_token_id"))
    if topics is not None and len(topics) != len(token_documents):
        raise ValueError(
            f"topics must give one topic per document ({len(token_documents)}), got {len(topics)}"
        )


class PairBrowser(LessonWidget):
    """:func:`nsp_pair_widget`'s box; ``.sliders`` is ``(nsp_probability, pair)``."""

    @property
    def sliders(self) -> tuple[widgets.FloatSlider, widgets.IntSlider]:
        return self.controls["nsp_probability"], self.controls["pair"]


def _browser_sliders(nsp_probability: float, n_pairs: int) -> dict[str, widgets.ValueWidget]:
    return {
        "nsp_probability": float_slider(
            "nsp_probability",
            nsp_probability,
            1.0,
            step=0.05,
            continuous_update=False,
            style={"description_width": "initial"},
        ),
        "pair": widgets.IntSlider(
            value=0, min=0, max=n_pairs - 1, description="pair", continuous_update=False
        ),
    }


def nsp_pair_widget(
    token_documents: Sequence[Sequence[Sequence[int]]],
    tokenizer: Any,
    *,
    topics: Sequence[str] | None = None,
    max_length: int = 32,
    nsp_probability: float = 0.5,
    short_seq_prob: float = 0.1,
    seed: int = 0,
) -> PairBrowser:
    """Browse NSP pairs built from ``token_documents`` (lists of sentences of token ids).

    Controls: ``nsp_probability`` (first slider; the pairs are rebuilt from ``seed``) and
    ``pair`` (which example to show). The output shows the token table, the label, the decoded
    segments (with the document and, given ``topics`` (one per document), the topic each came
    from), the share of NotNext pairs, and the hidden state. ``.sliders`` holds both sliders.
    """
    nsp_probability = check_probability("nsp_probability", nsp_probability)
    seed = check_int("seed", seed)
    _check_browser_args(token_documents, tokenizer, topics)
    index = DocumentIndex(token_documents)
    built: dict[float, dict[str, torch.Tensor]] = {}

    def pairs_at(p: float) -> dict[str, torch.Tensor]:
        """The pairs for ``p``, built once per value (always from ``seed``)."""
        if p not in built:
            built.clear()  # keep only the pairs on show
            built[p] = make_nsp_pairs(
                token_documents,
                **pair_token_ids(tokenizer),
                max_length=max_length,
                nsp_probability=p,
                short_seq_prob=short_seq_prob,
                generator=torch.Generator().manual_seed(seed),
            )
        return built[p]

    sliders = _browser_sliders(nsp_probability, len(pairs_at(nsp_probability)["input_ids"]))
    p_slider, pair_slider = sliders["nsp_probability"], sliders["pair"]

    def on_probability(change: dict[str, Any]) -> None:  # runs before the redraw
        n = pairs_at(float(change["new"]))["input_ids"].shape[0]
        pair_slider.value = min(pair_slider.value, n - 1)
        pair_slider.max = n - 1

    def draw() -> tuple[OutputRecord, ...]:
        p = float(p_slider.value)
        return _browser_outputs(
            tokenizer, pairs_at(p), int(pair_slider.value), p, lambda s: _source(index, topics, s)
        )

    p_slider.observe(on_probability, names="value")
    return PairBrowser(sliders, draw, rows=[widgets.HBox([p_slider, pair_slider])])
