"""Lesson 00 (start here): one sentence seen by the three objectives, as token tables.

* MLM: ``[CLS] A [SEP]`` with some tokens selected and corrupted; labels = original id at the
  selected positions, -100 elsewhere (:func:`lmlessons.mask_tokens`).
* CLM: ``labels = input_ids.clone()``; the loss shifts them, so position t is scored on token
  t + 1 and the last position has no target (:func:`lmlessons.shift_labels`).
* NSP: ``[CLS] A [SEP] B [SEP]`` with ``token_type_ids`` 0 for A and 1 for B and one label per
  pair: 0 = B follows A (IsNext), 1 = B comes from another document (NotNext).

:func:`objectives_widget` switches between them; its marker line reads
``[widget] example=0 objective=MLM seed=0 tokens=15 targets=2``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets
import torch

from lmlessons.masking import mask_tokens
from lmlessons.shifting import shift_labels
from lmlessons.widgets.display import COLORS, token_table_html

__all__ = ["mlm_example", "clm_example", "nsp_example", "objectives_marker", "objectives_widget"]

OBJECTIVES = ("MLM", "CLM", "NSP")


def _special(tokenizer: Any, ids: torch.Tensor) -> torch.Tensor:
    return torch.isin(ids, torch.tensor(sorted(set(tokenizer.all_special_ids))))


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
    selected = labels != -100
    input_colors = []
    for t in range(len(ids)):
        if special[t]:
            input_colors.append(COLORS["special"])
        elif not selected[t]:
            input_colors.append(None)
        elif masked[t] == tokenizer.mask_token_id:
            input_colors.append(COLORS["mask"])
        elif masked[t] == ids[t]:
            input_colors.append(COLORS["kept"])
        else:
            input_colors.append(COLORS["random"])
    rows = {
        "original": tokenizer.convert_ids_to_tokens(ids.tolist()),
        "input_ids": tokenizer.convert_ids_to_tokens(masked.tolist()),
        "labels": labels.tolist(),
        "label token": [
            tokenizer.convert_ids_to_tokens(int(i)) if i != -100 else "" for i in labels.tolist()
        ],
    }
    colors = {
        "input_ids": input_colors,
        "labels": [COLORS["target"] if s else COLORS["ignored"] for s in selected.tolist()],
        "label token": [COLORS["target"] if s else COLORS["ignored"] for s in selected.tolist()],
    }
    n = int(selected.sum())
    table = token_table_html(
        rows,
        colors=colors,
        caption=f"MLM: guess the selected tokens from both sides ({n} target{'s' if n != 1 else ''})",
        legend={
            "special": COLORS["special"],
            "[MASK]": COLORS["mask"],
            "random": COLORS["random"],
            "kept": COLORS["kept"],
            "target": COLORS["target"],
            "-100: no loss": COLORS["ignored"],
        },
    )
    return table, n


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
            tokens[t + 1] if t + 1 < len(tokens) else "-100" for t in range(len(tokens))
        ],
    }
    has = targets != -100
    colors = {
        "target of position t": [COLORS["target"] if h else COLORS["ignored"] for h in has.tolist()]
    }
    n = int(has.sum())
    table = token_table_html(
        rows,
        colors=colors,
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
    rows = {"input_ids": tokens, "token_type_ids": types}
    column_colors = [
        COLORS["special"]
        if t in tokenizer.all_special_tokens
        else (COLORS["segment_a"] if s == 0 else COLORS["segment_b"])
        for t, s in zip(tokens, types)
    ]
    name = (
        "IsNext: B follows A"
        if next_sentence_label == 0
        else "NotNext: B comes from another document"
    )
    table = token_table_html(
        rows,
        column_colors=column_colors,
        caption=f"NSP: one label for the whole pair, read at [CLS]: next_sentence_label = {next_sentence_label} ({name})",
        legend={
            "segment A (token_type 0)": COLORS["segment_a"],
            "segment B (token_type 1)": COLORS["segment_b"],
            "special": COLORS["special"],
        },
    )
    return table, 1


def objectives_marker(*, example: int, objective: str, seed: int, tokens: int, targets: int) -> str:
    return f"[widget] example={example} objective={objective} seed={seed} tokens={tokens} targets={targets}"


def objectives_widget(
    tokenizer: Any, examples: Sequence[tuple[str, str, str]], *, mlm_probability: float = 0.15
) -> widgets.VBox:
    """Slider ``example`` (first), buttons ``objective`` (MLM / CLM / NSP) and slider ``seed``.

    ``examples``: triples ``(A, B, C)``: B follows A in a document, C comes from another one.
    NSP shows (A, B) with label 0 for even seeds and (A, C) with label 1 for odd seeds.
    The returned ``VBox`` carries ``.controls``, ``.output`` and ``.redraw()``.
    """
    if isinstance(examples, str) or not isinstance(examples, Sequence) or not examples:
        raise ValueError("examples must be a non-empty list of (A, B, C) sentence triples")
    for i, e in enumerate(examples):
        if not (
            isinstance(e, (tuple, list))
            and len(e) == 3
            and all(isinstance(s, str) and s.strip() for s in e)
        ):
            raise TypeError(f"examples[{i}] must be a triple of non-empty sentences (A, B, C)")
    style = {"description_width": "80px"}
    ex_slider = widgets.IntSlider(
        value=0, min=0, max=len(examples) - 1, step=1, description="example", style=style
    )
    objective = widgets.ToggleButtons(
        options=list(OBJECTIVES), value="MLM", description="objective", style=style
    )
    seed = widgets.IntSlider(value=0, min=0, max=20, step=1, description="seed", style=style)
    out = widgets.Output()

    def redraw(*_: Any) -> None:
        a, b, c = examples[int(ex_slider.value)]
        s = int(seed.value)
        if objective.value == "MLM":
            table, n = mlm_example(tokenizer, a, mlm_probability=mlm_probability, seed=s)
            n_tokens = len(tokenizer(a, truncation=True)["input_ids"])
        elif objective.value == "CLM":
            table, n = clm_example(tokenizer, a)
            n_tokens = len(tokenizer(a, truncation=True)["input_ids"])
        else:
            label = s % 2
            second = b if label == 0 else c
            table, n = nsp_example(tokenizer, a, second, label)
            n_tokens = len(tokenizer(a, second, truncation=True)["input_ids"])
        marker = objectives_marker(
            example=int(ex_slider.value),
            objective=objective.value,
            seed=s,
            tokens=n_tokens,
            targets=n,
        )
        out.outputs = (
            {"output_type": "stream", "name": "stdout", "text": marker + "\n"},
            {
                "output_type": "display_data",
                "data": {"text/html": table, "text/plain": "<table>"},
                "metadata": {},
            },
        )

    for w in (ex_slider, objective, seed):
        w.observe(redraw, names="value")
    redraw()
    box = widgets.VBox([ex_slider, objective, seed, out])
    box.controls = {"example": ex_slider, "objective": objective, "seed": seed}  # type: ignore[attr-defined]
    box.output = out  # type: ignore[attr-defined]
    box.redraw = redraw  # type: ignore[attr-defined]
    return box


def start_quiz() -> Any:
    """Two warm-up questions for lesson 00, shown with the course's quiz widget
    (:class:`lmlessons.exercises.Quiz`; lessons 01-07 use ``quiz("NN")``)."""
    from lmlessons.exercises import Quiz
    from lmlessons.exercises.quizzes import Choice, Question

    questions = (
        Question(
            "00.1",
            "In the MLM example, which positions have a label other than -100?",
            (
                Choice(
                    "Every position of the sentence.",
                    False,
                    "Then the model would also be scored on tokens it can see unchanged: an easy copy task. "
                    "Only the selected positions are scored.",
                ),
                Choice(
                    "The selected positions, whatever they became ([MASK], a random token or unchanged).",
                    True,
                    "Right: a selected position keeps its original id as label even when its input token was "
                    "replaced by a random one or kept; every other position is -100.",
                ),
                Choice(
                    "Only the positions that show [MASK].",
                    False,
                    "Selected tokens replaced by a random token or kept unchanged are targets too (lesson 01).",
                ),
                Choice(
                    "[CLS], because it summarises the sentence.",
                    False,
                    "[CLS] and [SEP] are never selected in MLM. [CLS] carries the NSP label instead.",
                ),
            ),
        ),
        Question(
            "00.2",
            "How many labels does one NSP example [CLS] A [SEP] B [SEP] have?",
            (
                Choice("One per token.", False, "NSP classifies the pair, not its tokens."),
                Choice(
                    "Two: one per segment.",
                    False,
                    "token_type_ids tell the model which segment a token is in; "
                    "they are inputs, not labels.",
                ),
                Choice(
                    "One for the whole pair: 0 if B follows A, 1 if B comes from another document.",
                    True,
                    "Right: next_sentence_label, predicted from the [CLS] position. 0 = IsNext is the convention "
                    "of BERT and transformers (d2l.ai uses the opposite).",
                ),
                Choice(
                    "None: NSP is unsupervised.",
                    False,
                    "The label comes for free from the corpus, but there is "
                    "one, and a cross-entropy loss on it.",
                ),
            ),
        ),
    )
    return Quiz(questions, "Quick check: lesson 00")
