"""Lesson 00 (start here): one sentence seen by the three objectives, as token tables.

* MLM: ``[CLS] A [SEP]`` with some tokens selected and corrupted; labels = original id at the
  selected positions, -100 elsewhere (:func:`lmlessons.mask_tokens`).
* CLM: ``labels = input_ids.clone()``; the loss shifts them, so position t is scored on token
  t + 1 and the last position has no target (:func:`lmlessons.shift_labels`).
* NSP: ``[CLS] A [SEP] B [SEP]`` with ``token_type_ids`` 0 for A and 1 for B and one label per
  pair: 0 = B follows A (IsNext), 1 = B comes from another document (NotNext).

:func:`objectives_widget` switches between them; its hidden state reads
``example=0 objective=MLM seed=0 tokens=15 targets=2``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets
import torch

from lmlessons._checks import IGNORE_INDEX
from lmlessons.exercises import Quiz
from lmlessons.exercises.quizzes import START_QUESTIONS
from lmlessons.masking import mask_tokens
from lmlessons.shifting import shift_labels
from lmlessons.widgets.base import LessonWidget
from lmlessons.widgets.display import (
    COLORS,
    OutputRecord,
    token_table_html,
    view_outputs,
)

__all__ = [
    "mlm_example",
    "clm_example",
    "nsp_example",
    "objectives_marker",
    "objectives_widget",
    "start_quiz",
]

OBJECTIVES = ("MLM", "CLM", "NSP")
_MLM_LEGEND = {
    "special": COLORS["special"],
    "[MASK]": COLORS["mask"],
    "random": COLORS["random"],
    "kept": COLORS["kept"],
    "target": COLORS["target"],
    "-100: no loss": COLORS["ignored"],
}


def _special(tokenizer: Any, ids: torch.Tensor) -> torch.Tensor:
    return torch.isin(ids, torch.tensor(sorted(set(tokenizer.all_special_ids))))


def _fate_colors(
    tokenizer: Any,
    ids: torch.Tensor,
    masked: torch.Tensor,
    selected: torch.Tensor,
    special: torch.Tensor,
) -> list[str | None]:
    """Colour of each input position: special, not selected (none), [MASK], kept or random."""
    colors: list[str | None] = []
    for t in range(len(ids)):
        if special[t]:
            colors.append(COLORS["special"])
        elif not selected[t]:
            colors.append(None)
        elif masked[t] == tokenizer.mask_token_id:
            colors.append(COLORS["mask"])
        elif masked[t] == ids[t]:
            colors.append(COLORS["kept"])
        else:
            colors.append(COLORS["random"])
    return colors


def _target_colors(has_target: torch.Tensor) -> list[str | None]:
    return [COLORS["target"] if h else COLORS["ignored"] for h in has_target.tolist()]


def mlm_example(
    tokenizer: Any, text: str, *, mlm_probability: float = 0.15, seed: int = 0
) -> tuple[str, int]:
    """Token table (HTML) of ``text`` as an MLM example, and its number of targets."""
    ids = torch.tensor(tokenizer(text, truncation=True)["input_ids"])  # (T,)
    special = _special(tokenizer, ids)
    masked, labels = mask_tokens(
        ids[None],
        mask_token_id=tokenizer.mask_token_id,
        vocab_size=len(tokenizer),
        special_tokens_mask=special[None],
        mlm_probability=mlm_probability,
        generator=torch.Generator().manual_seed(seed),
    )
    masked, labels = masked[0], labels[0]
    selected = labels != IGNORE_INDEX
    rows = {
        "original": tokenizer.convert_ids_to_tokens(ids.tolist()),
        "input_ids": tokenizer.convert_ids_to_tokens(masked.tolist()),
        "labels": labels.tolist(),
        "label token": [
            tokenizer.convert_ids_to_tokens(int(i)) if i != IGNORE_INDEX else ""
            for i in labels.tolist()
        ],
    }
    colors = {
        "input_ids": _fate_colors(tokenizer, ids, masked, selected, special),
        "labels": _target_colors(selected),
        "label token": _target_colors(selected),
    }
    n = int(selected.sum())
    caption = f"MLM: guess the selected tokens from both sides ({n} target{'s' if n != 1 else ''})"
    return token_table_html(rows, colors=colors, caption=caption, legend=_MLM_LEGEND), n


def clm_example(tokenizer: Any, text: str) -> tuple[str, int]:
    """Token table (HTML) of ``text`` as a causal-LM example, and its number of targets."""
    ids = torch.tensor(tokenizer(text, truncation=True)["input_ids"])  # (T,)
    labels = ids.clone()  # what you pass to the model: NOT shifted
    targets = shift_labels(labels)  # what position t is scored on, inside the loss
    tokens = tokenizer.convert_ids_to_tokens(ids.tolist())
    rows = {
        "input_ids": tokens,
        "labels (passed)": labels.tolist(),
        "target of position t": [
            tokens[t + 1] if t + 1 < len(tokens) else str(IGNORE_INDEX) for t in range(len(tokens))
        ],
    }
    has = targets != IGNORE_INDEX
    n = int(has.sum())
    table = token_table_html(
        rows,
        colors={"target of position t": _target_colors(has)},
        caption=f"CLM: every position guesses the NEXT token from the left only ({n} targets)",
        legend={"target (token t + 1)": COLORS["target"], "-100: no loss": COLORS["ignored"]},
    )
    return table, n


def nsp_example(
    tokenizer: Any, sentence_a: str, sentence_b: str, next_sentence_label: int
) -> tuple[str, int]:
    """Token table (HTML) of an NSP pair ``[CLS] A [SEP] B [SEP]``; returns (html, 1 target)."""
    if next_sentence_label not in (0, 1):
        raise ValueError(
            f"next_sentence_label must be 0 (IsNext) or 1 (NotNext), got {next_sentence_label!r}"
        )
    enc = tokenizer(sentence_a, sentence_b, truncation=True)
    tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"])
    types = enc["token_type_ids"]
    column_colors = [
        COLORS["special"]
        if t in tokenizer.all_special_tokens
        else (COLORS["segment_a"] if s == 0 else COLORS["segment_b"])
        for t, s in zip(tokens, types)
    ]
    if next_sentence_label == 0:
        name = "IsNext: B follows A"
    else:
        name = "NotNext: B comes from another document"
    table = token_table_html(
        {"input_ids": tokens, "token_type_ids": types},
        column_colors=column_colors,
        caption="NSP: one label for the whole pair, read at [CLS]: "
        f"next_sentence_label = {next_sentence_label} ({name})",
        legend={
            "segment A (token_type 0)": COLORS["segment_a"],
            "segment B (token_type 1)": COLORS["segment_b"],
            "special": COLORS["special"],
        },
    )
    return table, 1


def objectives_marker(*, example: int, objective: str, seed: int, tokens: int, targets: int) -> str:
    """The widget's state (hidden) (deterministic: what a browser test waits for)."""
    return f"example={example} objective={objective} seed={seed} tokens={tokens} targets={targets}"


def _check_examples(examples: object) -> Sequence[tuple[str, str, str]]:
    if isinstance(examples, str) or not isinstance(examples, Sequence) or not examples:
        raise ValueError("examples must be a non-empty list of (A, B, C) sentence triples")
    for i, e in enumerate(examples):
        if not (
            isinstance(e, (tuple, list))
            and len(e) == 3
            and all(isinstance(s, str) and s.strip() for s in e)
        ):
            raise TypeError(f"examples[{i}] must be a triple of non-empty sentences (A, B, C)")
    return examples


def _objective_example(
    tokenizer: Any, triple: Sequence[str], objective: str, seed: int, mlm_probability: float
) -> tuple[str, int, int]:
    """(table, number of targets, number of tokens) of one example under ``objective``."""
    a, b, c = triple
    if objective == "MLM":
        table, n = mlm_example(tokenizer, a, mlm_probability=mlm_probability, seed=seed)
        return table, n, len(tokenizer(a, truncation=True)["input_ids"])
    if objective == "CLM":
        table, n = clm_example(tokenizer, a)
        return table, n, len(tokenizer(a, truncation=True)["input_ids"])
    label = seed % 2  # NSP: (A, B) IsNext for even seeds, (A, C) NotNext for odd ones
    second = b if label == 0 else c
    table, n = nsp_example(tokenizer, a, second, label)
    return table, n, len(tokenizer(a, second, truncation=True)["input_ids"])


def objectives_widget(
    tokenizer: Any, examples: Sequence[tuple[str, str, str]], *, mlm_probability: float = 0.15
) -> LessonWidget:
    """Slider ``example`` (first), buttons ``objective`` (MLM / CLM / NSP) and slider ``seed``.

    ``examples``: triples ``(A, B, C)``: B follows A in a document, C comes from another one.
    NSP shows (A, B) with label 0 for even seeds and (A, C) with label 1 for odd seeds.
    The returned :class:`LessonWidget` carries ``.controls``, ``.output`` and ``.redraw()``.
    """
    examples = _check_examples(examples)
    style = {"description_width": "80px"}
    controls = {
        "example": widgets.IntSlider(
            value=0, min=0, max=len(examples) - 1, step=1, description="example", style=style
        ),
        "objective": widgets.ToggleButtons(
            options=list(OBJECTIVES), value="MLM", description="objective", style=style
        ),
        "seed": widgets.IntSlider(value=0, min=0, max=20, step=1, description="seed", style=style),
    }

    def draw() -> tuple[OutputRecord, ...]:
        example, objective = int(controls["example"].value), controls["objective"].value
        seed = int(controls["seed"].value)
        table, n, n_tokens = _objective_example(
            tokenizer, examples[example], objective, seed, mlm_probability
        )
        marker = objectives_marker(
            example=example, objective=objective, seed=seed, tokens=n_tokens, targets=n
        )
        return view_outputs(marker, table)

    return LessonWidget(controls, draw)


#: The two warm-up questions of lesson 00 (lessons 01-07 keep theirs in
#: :mod:`lmlessons.exercises.quizzes`).


def start_quiz() -> Quiz:
    """Two warm-up questions for lesson 00, shown with the course's quiz widget
    (:class:`lmlessons.exercises.Quiz`; lessons 01-07 use ``quiz("NN")``)."""
    return Quiz(START_QUESTIONS, "Quick check: lesson 00")
