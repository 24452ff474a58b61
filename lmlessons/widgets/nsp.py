"""Lesson 05 (NSP pairs): the pair browser and the lesson's table and plot helpers.

:func:`nsp_pair_widget` builds next-sentence-prediction pairs with :func:`lmlessons.make_nsp_pairs`
from tokenized documents and shows one of them as a token table: segment A and segment B in
their own colours, the special tokens in grey, with ``token_type_ids`` and ``attention_mask``
beneath, the ``next_sentence_label`` and the decoded text. Its first slider is
``nsp_probability`` (the pairs are rebuilt with the same seed when it moves), the second picks
the pair. Every redraw writes one marker line, e.g.
``[widget] nsp_probability=0.50 pair=0 label=IsNext notnext_rate=0.48``, so a browser test can
check that moving the slider really rebuilt the pairs.

The output is an ``ipywidgets.Output`` whose ``outputs`` are replaced in one assignment, so the
widget works the same in a kernel and in plain pytest.
"""

from __future__ import annotations

import bisect
import html
from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as widgets
import torch

from lmlessons._checks import check_int, check_probability
from lmlessons.pairs import make_nsp_pairs
from lmlessons.widgets.display import COLORS, token_table_html

__all__ = [
    "LABEL_NAMES",
    "DocumentIndex",
    "label_name",
    "pair_segments",
    "segment_colors",
    "pair_table_html",
    "nsp_marker",
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
    rows: dict[str, list[object]] = {"token": tokenizer.convert_ids_to_tokens(ids[:width])}
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
        f"[widget] nsp_probability={nsp_probability:.2f} pair={pair} label={label_name(label)} "
        f"notnext_rate={notnext_rate:.2f}"
    )


def _text_html(tokenizer: Any, a: Sequence[int], b: Sequence[int]) -> str:
    def span(ids: Sequence[int], color: str, name: str) -> str:
        text = html.escape(tokenizer.decode(list(ids)))
        return (
            f'<div style="margin:2px 0"><b>{name}</b> <span style="background:{color};padding:1px 4px">'
            f"{text}</span></div>"
        )

    return span(a, COLORS["segment_a"], "A:") + span(b, COLORS["segment_b"], "B:")


def nsp_pair_widget(
    token_documents: Sequence[Sequence[Sequence[int]]],
    tokenizer: Any,
    *,
    topics: Sequence[str] | None = None,
    max_length: int = 32,
    nsp_probability: float = 0.5,
    short_seq_prob: float = 0.1,
    seed: int = 0,
) -> widgets.VBox:
    """Browse NSP pairs built from ``token_documents`` (lists of sentences of token ids).

    Controls: ``nsp_probability`` (first slider; the pairs are rebuilt from ``seed``) and
    ``pair`` (which example to show). The output shows the token table, the label, the decoded
    segments (with the document and, given ``topics`` (one per document), the topic each came
    from), the share of NotNext pairs, and the marker line.
    """
    nsp_probability = check_probability("nsp_probability", nsp_probability)
    seed = check_int("seed", seed)
    for attr in ("cls_token_id", "sep_token_id", "pad_token_id"):
        if getattr(tokenizer, attr, None) is None:
            raise ValueError(f"tokenizer must define {attr} (a BERT-style tokenizer)")
    if topics is not None and len(topics) != len(token_documents):
        raise ValueError(
            f"topics must give one topic per document ({len(token_documents)}), got {len(topics)}"
        )
    index = DocumentIndex(token_documents)

    def source(segment: Sequence[int]) -> str:
        docs = index.find(segment)
        if not docs:
            return "not found"
        names = [f"{d} ({topics[d]})" if topics is not None else str(d) for d in docs[:3]]
        more = f" and {len(docs) - 3} more" if len(docs) > 3 else ""
        return ("document " if len(docs) == 1 else "documents ") + ", ".join(names) + more

    def build(p: float) -> dict[str, torch.Tensor]:
        return make_nsp_pairs(
            token_documents,
            cls_token_id=tokenizer.cls_token_id,
            sep_token_id=tokenizer.sep_token_id,
            pad_token_id=tokenizer.pad_token_id,
            max_length=max_length,
            nsp_probability=p,
            short_seq_prob=short_seq_prob,
            generator=torch.Generator().manual_seed(seed),
        )

    state = {"pairs": build(nsp_probability), "busy": False}
    p_slider = widgets.FloatSlider(
        value=nsp_probability,
        min=0.0,
        max=1.0,
        step=0.05,
        description="nsp_probability",
        readout_format=".2f",
        continuous_update=False,
        style={"description_width": "initial"},
    )
    pair_slider = widgets.IntSlider(
        value=0,
        min=0,
        max=state["pairs"]["input_ids"].shape[0] - 1,
        description="pair",
        continuous_update=False,
    )
    out = widgets.Output()

    def redraw() -> None:
        pairs = state["pairs"]
        row = pair_slider.value
        label = int(pairs["next_sentence_label"][row])
        labels = pairs["next_sentence_label"]
        rate = labels.float().mean().item()
        a, b = pair_segments(pairs, row)
        n_pairs = labels.numel()
        summary = (
            f'<div style="font-size:12px">{n_pairs} pairs built with nsp_probability = '
            f"{p_slider.value:.2f}: {int(labels.sum())} NotNext ({rate:.2f}), "
            f"{n_pairs - int(labels.sum())} IsNext. "
            f"<b>next_sentence_label = {label} ({label_name(label)})</b>: "
            + (
                "B is the text that follows A in its document."
                if label == 0
                else "B comes from another document."
            )
            + "</div>"
        )
        where = (
            f'<div style="font-size:12px">A from {html.escape(source(a))}; '
            f"B from {html.escape(source(b))}</div>"
        )
        body = (
            pair_table_html(tokenizer, pairs, row, show_padding=False)
            + _text_html(tokenizer, a, b)
            + where
            + summary
        )
        marker = nsp_marker(p_slider.value, row, label, rate)
        out.outputs = (
            {
                "output_type": "display_data",
                "data": {"text/html": body, "text/plain": marker},
                "metadata": {},
            },
            {"output_type": "stream", "name": "stdout", "text": marker + "\n"},
        )

    def on_probability(change: dict) -> None:
        state["busy"] = True
        try:
            state["pairs"] = build(float(change["new"]))
            n = state["pairs"]["input_ids"].shape[0]
            pair_slider.value = min(pair_slider.value, n - 1)
            pair_slider.max = n - 1
        finally:
            state["busy"] = False
        redraw()

    def on_pair(change: dict) -> None:
        if not state["busy"]:
            redraw()

    p_slider.observe(on_probability, names="value")
    pair_slider.observe(on_pair, names="value")
    redraw()
    box = widgets.VBox([widgets.HBox([p_slider, pair_slider]), out])
    box.sliders = (p_slider, pair_slider)  # type: ignore[attr-defined]  # for tests
    box.output = out  # type: ignore[attr-defined]
    return box
