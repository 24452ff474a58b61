"""Lesson 09 (packing and perplexity): a packed batch's boundaries, targets and attention.

* :func:`packed_batch`: the same documents laid out three ways in one row: ``"flattened"``
  (``DataCollatorWithFlattening``, attention kept in each document), ``"leaking"`` (the same
  batch where the model ignores the boundaries: what the lesson measures under the model's
  defaults) and ``"grouped"`` (``group_texts``: one stream, every next token a target);
* :func:`packing_widget`: a ``layout`` toggle and a ``position`` slider; the output shows the
  documents, ``position_ids``, tokens, targets (``-100`` where nothing is learned) and what the
  position attends to, as a token table and a heatmap with the document boundaries drawn;
* :func:`padding_share` and :func:`plot_padding_share`: the share of a padded batch that is
  padding, against the batch size;
* :data:`LEAK_CHOICES`, :func:`leak_reveal`, :data:`BPB_CHOICES`, :func:`bpb_reveal`: the
  lesson's two predictions, and their measured answers and explanations computed from the
  lesson's measurements (so that neither is written in the lesson's source).

The widget writes one hidden state per redraw, e.g.
``layout=flattened position=9 document=1 sees=3 target=-100 sees_other_documents=False``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as widgets
import torch

from lmlessons._checks import IGNORE_INDEX, check_int
from lmlessons.packing import block_causal_mask, document_ids, flatten_documents
from lmlessons.shifting import shift_labels
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
    "LAYOUTS",
    "packed_batch",
    "packing_view",
    "packing_marker",
    "packing_table_html",
    "plot_packed_attention",
    "packing_widget",
    "padding_share",
    "plot_padding_share",
    "LEAK_CHOICES",
    "leak_reveal",
    "BPB_CHOICES",
    "bpb_reveal",
]

IGNORED = str(IGNORE_INDEX)
#: The layouts the widget shows, with the toggle's labels.
LAYOUTS: dict[str, str] = {
    "flattened": "flattened: attention per document",
    "leaking": "flattened, attention leaks",
    "grouped": "group_texts: one stream",
}
VIEW_COLORS: dict[str, str] = {
    "current": COLORS["kept"],  # the position itself
    "visible": COLORS["segment_a"],  # same document, may attend to it
    "other": COLORS["mask"],  # another document, and it may attend to it: a leak
    "hidden": COLORS["ignored"],  # cannot attend to it
}
_LEGEND = {
    "position t": VIEW_COLORS["current"],
    "t attends to it": VIEW_COLORS["visible"],
    "t attends to another document": VIEW_COLORS["other"],
    "hidden from t": VIEW_COLORS["hidden"],
    "target": COLORS["target"],
    "-100: nothing learned": COLORS["ignored"],
}


def _check_layout(layout: object) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {tuple(LAYOUTS)}, got {layout!r}")
    return str(layout)


def packed_batch(docs: Sequence[Sequence[int]], layout: str) -> dict[str, torch.Tensor]:
    """One row of ``docs`` laid out as ``layout``: ``input_ids``, ``targets`` (the labels after
    the model's shift: ``targets[t]`` is what position t is trained to predict), ``position_ids``,
    ``documents`` (each ``(N,)``) and ``attention`` ``(N, N)`` (True: query i attends to key j).
    """
    layout = _check_layout(layout)
    flat = flatten_documents(docs)  # each (1, N)
    documents = document_ids(flat["position_ids"])[0]  # (N,)
    n = documents.shape[0]
    causal = torch.ones(n, n, dtype=torch.bool).tril()  # (N, N)
    if layout == "flattened":
        labels, positions, attention = flat["labels"], flat["position_ids"], None
    elif layout == "leaking":
        labels, positions, attention = flat["labels"], flat["position_ids"], causal
    else:  # grouped: no separator in the labels, positions 0..N-1, plain causal attention
        labels, positions, attention = flat["input_ids"], torch.arange(n)[None], causal
    if attention is None:
        attention = block_causal_mask(flat["position_ids"])[0]  # (N, N)
    return {
        "input_ids": flat["input_ids"][0],
        "targets": shift_labels(labels)[0],
        "position_ids": positions[0],
        "documents": documents,
        "attention": attention,
    }


def packing_view(batch: dict[str, torch.Tensor], position: int) -> dict[str, Any]:
    """What ``position`` sees in ``batch`` (from :func:`packed_batch`) and must predict:
    ``visible`` (bools), ``sees`` (their number), ``document``, ``target`` (an id or -100) and
    ``sees_other_documents`` (a key of another document is visible: attention leaks)."""
    n = batch["input_ids"].shape[0]
    position = check_int("position", position, minimum=0)
    if position >= n:
        raise ValueError(f"position must be in [0, {n}), got {position}")
    visible = batch["attention"][position]  # (N,)
    other = batch["documents"] != batch["documents"][position]  # (N,)
    return {
        "position": position,
        "visible": [bool(v) for v in visible.tolist()],
        "sees": int(visible.sum()),
        "document": int(batch["documents"][position]),
        "target": int(batch["targets"][position]),
        "sees_other_documents": bool((visible & other).any()),
    }


def packing_marker(layout: str, view: dict[str, Any]) -> str:
    """The hidden state, e.g. ``layout=flattened position=9 document=1 sees=3 target=-100
    sees_other_documents=False`` (the target as an id: deterministic, no token text)."""
    return (
        f"layout={layout} position={view['position']} document={view['document']} "
        f"sees={view['sees']} target={view['target']} "
        f"sees_other_documents={view['sees_other_documents']}"
    )


def _attention_colors(batch: dict[str, torch.Tensor], view: dict[str, Any]) -> list[str | None]:
    t, doc = view["position"], view["document"]
    out: list[str | None] = []
    for j, vis in enumerate(view["visible"]):
        if j == t:
            out.append(VIEW_COLORS["current"])
        elif not vis:
            out.append(VIEW_COLORS["hidden"])
        else:
            same = int(batch["documents"][j]) == doc
            out.append(VIEW_COLORS["visible"] if same else VIEW_COLORS["other"])
    return out


def packing_table_html(
    tokens: Sequence[str],
    batch: dict[str, torch.Tensor],
    view: dict[str, Any],
    *,
    target_tokens: Sequence[str],
    caption: str | None = None,
) -> str:
    """Rows: document, ``position_ids``, the input tokens (coloured by what position t attends
    to) and the target of every position (``-100`` where nothing is learned)."""
    if len(tokens) != batch["input_ids"].shape[0] or len(target_tokens) != len(tokens):
        raise ValueError("tokens and target_tokens must have one entry per position of batch")
    targets = [str(t) for t in target_tokens]
    rows: dict[str, Sequence[object]] = {
        "document": [int(d) for d in batch["documents"].tolist()],
        "position_ids": [int(p) for p in batch["position_ids"].tolist()],
        "input_ids": list(tokens),
        "target (t + 1)": targets,
    }
    colors: dict[str, Sequence[str | None]] = {
        "input_ids": _attention_colors(batch, view),
        "target (t + 1)": [
            COLORS["ignored"] if v == IGNORED else COLORS["target"] for v in targets
        ],
    }
    return token_table_html(rows, colors=colors, caption=caption, legend=_LEGEND)


def plot_packed_attention(
    ax: Any, batch: dict[str, torch.Tensor], *, row: int | None = None, title: str | None = None
) -> Any:
    """The attention pattern ``(N, N)`` as a heatmap (row = query, column = key), with a line
    at every document boundary and the query ``row`` outlined."""
    attention = batch["attention"].float()  # (N, N)
    n = attention.shape[0]
    attention_axes(ax, attention.numpy(), vmax=1.0, row=row, title=title)
    starts = [j for j in range(1, n) if batch["documents"][j] != batch["documents"][j - 1]]
    for j in starts:
        ax.axvline(j - 0.5, color="#d7191c", lw=1.2, ls="--")
        ax.axhline(j - 0.5, color="#d7191c", lw=1.2, ls="--")
    return ax


def _heatmap(batch: dict[str, torch.Tensor], layout: str, view: dict[str, Any]) -> OutputRecord:
    fig = new_figure(4.2, 4.2)
    plot_packed_attention(fig.add_subplot(), batch, row=view["position"], title=LAYOUTS[layout])
    alt = (
        f"Heatmap of the attention of the packed batch ({LAYOUTS[layout]}): one row per query, one "
        f"column per key, dashed lines at document boundaries; row {view['position']} is outlined "
        f"and attends to {view['sees']} position(s)"
    )
    return png_output(figure_png(fig), alt)


def packing_widget(
    docs: Sequence[Sequence[int]],
    tokenizer: Any,
    *,
    layout: str = "flattened",
    position: int | None = None,
    heatmap: bool = True,
) -> LessonWidget:
    """Lesson 09: a ``layout`` toggle and a ``position`` slider over ``docs`` packed in one row.

    ``tokenizer`` turns ids into token strings (``convert_ids_to_tokens``). The returned
    :class:`LessonWidget` carries ``.controls`` (``{"layout": ..., "position": ...}``),
    ``.output`` and ``.redraw()`` for tests.
    """
    batches = {name: packed_batch(docs, name) for name in LAYOUTS}
    ids = batches["flattened"]["input_ids"].tolist()
    tokens = tokenizer.convert_ids_to_tokens(ids)
    n = len(tokens)
    start = min(n - 1, len(docs[0])) if position is None else check_int("position", position)
    controls = {
        "layout": widgets.ToggleButtons(
            options=[(label, name) for name, label in LAYOUTS.items()],
            value=_check_layout(layout),
            description="layout",
            style={"description_width": "60px", "button_width": "210px"},
        ),
        "position": widgets.IntSlider(
            value=start, min=0, max=n - 1, description="position", layout={"width": "420px"}
        ),
    }

    def draw() -> tuple[OutputRecord, ...]:
        name = str(controls["layout"].value)
        batch = batches[name]
        view = packing_view(batch, int(controls["position"].value))
        targets = [
            IGNORED if t == IGNORE_INDEX else tokenizer.convert_ids_to_tokens(t)
            for t in batch["targets"].tolist()
        ]
        leak = (
            "attends to another document"
            if view["sees_other_documents"]
            else "stays in its document"
        )
        caption = (
            f"{LAYOUTS[name]}: position {view['position']} ({tokens[view['position']]!r}, document "
            f"{view['document']}) {leak} and must predict {targets[view['position']]!r}"
        )
        table = packing_table_html(tokens, batch, view, target_tokens=targets, caption=caption)
        picture = _heatmap(batch, name, view) if heatmap else None
        return view_outputs(packing_marker(name, view), table, picture)

    return LessonWidget(controls, draw)


def padding_share(lengths: Sequence[int], batch_size: int) -> float:
    """The share of the positions of padded batches that are padding: ``lengths`` taken in
    order, ``batch_size`` at a time, each batch padded to its longest."""
    batch_size = check_int("batch_size", batch_size, minimum=1)
    values = [check_int(f"lengths[{i}]", n, minimum=1) for i, n in enumerate(lengths)]
    if not values:
        raise ValueError("lengths must hold at least one length")
    padded = sum(
        max(values[i : i + batch_size]) * len(values[i : i + batch_size])
        for i in range(0, len(values), batch_size)
    )
    return 1.0 - sum(values) / padded


def plot_padding_share(
    ax: Any, curves: dict[str, Sequence[int]], batch_sizes: Sequence[int]
) -> Any:
    """One line per entry of ``curves`` (a name and its document lengths, in batching order):
    the share of padding against the batch size."""
    for name, lengths in curves.items():
        shares = [100 * padding_share(lengths, b) for b in batch_sizes]
        ax.plot(batch_sizes, shares, marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(batch_sizes), [str(b) for b in batch_sizes])
    ax.set_xlabel("documents per padded batch")
    ax.set_ylabel("padding (% of positions)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return ax


#: Lesson 09's first prediction: do the tokens of a flattened batch's third document attend to
#: the first two, under ``model(**batch)``?
LEAK_CHOICES: tuple[str, ...] = (
    "they attend only to their own document: position_ids mark the boundaries",
    "they also attend to the documents before them in the row",
    "it depends on the attention: sdpa keeps documents apart, eager does not",
)
_LEAK_WHY = (
    "With the model's defaults, in train and in eval mode, with eager and with sdpa, {verdict}. "
    "{kept} of the {cells} cells keep the documents apart: {which}."
)


def leak_reveal(results: Mapping[tuple[Any, ...], str]) -> tuple[str, str]:
    """The measured answer to :data:`LEAK_CHOICES` and its explanation, from lesson 09's verdicts
    ``results[mode, use_cache, attention_mask, attn_implementation, position_ids_given]``, each
    ``"equal"`` (the logits of each document alone) or ``"LEAKS"``. The question's setup is
    ``model(**batch)``: ``use_cache="default"``, no attention mask, ``position_ids`` given."""
    if not results or set(results.values()) - {"equal", "LEAKS"}:
        raise ValueError("results must map settings to 'equal' or 'LEAKS'")
    asked: dict[str, set[str]] = {}  # attention implementation -> verdicts in train and eval
    for (_, cache, mask, attn, given), verdict in results.items():
        if cache == "default" and mask is None and given:
            asked.setdefault(attn, set()).add(verdict)
    if not asked or any(len(v) != 1 for v in asked.values()):
        raise ValueError("results must hold one verdict per attention under the defaults")
    verdicts = {attn: next(iter(v)) for attn, v in asked.items()}
    if set(verdicts.values()) == {"equal"}:
        answer, said = LEAK_CHOICES[0], "each document's logits equal those of the document alone"
    elif set(verdicts.values()) == {"LEAKS"}:
        answer = LEAK_CHOICES[1]
        said = "the third document attends to the first two: its logits differ from it alone"
    elif verdicts.get("sdpa") == "equal":
        answer, said = LEAK_CHOICES[2], "only sdpa keeps the documents apart"
    else:
        raise ValueError(f"no choice describes these verdicts: {verdicts}")
    kept = [k for k, v in results.items() if v == "equal"]
    which = "; ".join(
        f"{mode} mode, use_cache={cache}, attention_mask={mask}, {attn}, "
        + ("position_ids given" if given else "no position_ids")
        for mode, cache, mask, attn, given in kept
    )
    why = _LEAK_WHY.format(verdict=said, kept=len(kept), cells=len(results), which=which or "none")
    return answer, why


#: Lesson 09's second prediction: in bits per byte of the same text, which model is better?
BPB_CHOICES: tuple[str, ...] = (
    "the character bigram model (far lower perplexity)",
    "the course GPT-2",
    "neither: the two numbers cannot be compared at all",
)


def bpb_reveal(
    bits_per_byte: Mapping[str, float], n_bytes: int, chars_per_token: float
) -> tuple[str, str]:
    """The measured answer to :data:`BPB_CHOICES` and its explanation, from the bits per byte of
    ``"course GPT-2"`` and ``"character bigram"`` on the same ``n_bytes`` bytes."""
    gpt2, bigram = bits_per_byte["course GPT-2"], bits_per_byte["character bigram"]
    answer = BPB_CHOICES[1] if gpt2 < bigram else BPB_CHOICES[0]
    better, worse = (
        ("course GPT-2", "character bigram")
        if gpt2 < bigram
        else ("character bigram", "course GPT-2")
    )
    why = (
        f"Per byte of the same {n_bytes:,} bytes, the course GPT-2 needs {gpt2:.2f} bits and the "
        f"character bigram {bigram:.2f}: the {better} predicts the text better than the {worse}. "
        f"Each GPT-2 token carries about {chars_per_token:.0f} characters, so its perplexity per "
        "token is bound to be far higher than that of a model of one character at a time."
    )
    return answer, why
