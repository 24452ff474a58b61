"""Lesson 10 (fine-tuning on the answer only): which tokens of a conversation are targets.

* :func:`label_chips_html`: the conversation as a wrapping row of token chips, each with its
  label below (``-100`` or the token), targets highlighted: a long conversation stays readable
  where a one-row table would not.
* :func:`answer_only_widget`: a ``train on`` toggle (:data:`lmlessons.course.chat.TRAIN_ON`) and
  a ``pad = eos`` checkbox over one conversation, labelled by
  :func:`lmlessons.course.chat.conversation_labels`; the output names how many tokens are
  targets, how many of them are prompt tokens and how many are end-of-turn tokens. A
  :class:`~lmlessons.widgets.base.LessonWidget`, so a viewer without a kernel sees the picture
  of its state.
* :func:`plot_answer_curves`: the loss each fine-tuning run reports and its held-out answer loss.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as widgets

from lmlessons._checks import IGNORE_INDEX
from lmlessons.course.chat import TRAIN_ON, conversation_labels
from lmlessons.course.palette import MUTED, on_color
from lmlessons.widgets.base import LessonWidget
from lmlessons.widgets.display import COLORS, OutputRecord, html_output, state_output

__all__ = [
    "label_chips_html",
    "answer_only_widget",
    "plot_answer_curves",
]

_LEGEND = {
    "target: learned": COLORS["target"],
    "label -100: nothing learned": COLORS["ignored"],
}
_CHIP = (
    "display:inline-block;border:1px solid #bbb;padding:1px 4px;margin:1px;text-align:center;"
    "font-family:monospace;font-size:12px;line-height:1.3;"
)


def label_chips_html(
    tokens: Sequence[str], labels: Sequence[int], *, caption: str | None = None
) -> str:
    """Each token as a chip with its label below it (``-100``, or the token's id); targets in
    the course's target colour (and bold), the rest grey. Wraps like text."""
    if len(tokens) != len(labels):
        raise ValueError(f"labels must have one entry per token ({len(tokens)}), got {len(labels)}")
    chips = []
    for token, label in zip(tokens, labels):
        target = label != IGNORE_INDEX
        color = COLORS["target"] if target else COLORS["ignored"]
        chips.append(
            f'<span style="{_CHIP}{on_color(color)}">{html.escape(token)}<br>'
            f'<span style="font-size:10px">{label}</span></span>'
        )
    legend = "".join(
        f'<span style="{_CHIP}{on_color(c)}">{html.escape(k)}</span>' for k, c in _LEGEND.items()
    )
    head = (
        f'<div style="font-weight:bold;margin:2px 0">{html.escape(caption)}</div>'
        if caption
        else ""
    )
    return (
        f'<div class="lmlessons-chips">{head}<div style="max-width:760px">{"".join(chips)}</div>'
        f'<div style="{MUTED}font-size:11px;margin:4px 0">labels below the tokens, unshifted (the '
        f"model shifts them) {legend}</div></div>"
    )


def _summary(
    tokenizer: Any, ids: list[int], labels: list[int], answers: set[int]
) -> dict[str, int]:
    eos = tokenizer.eos_token_id
    targets = [i for i, label in enumerate(labels) if label != IGNORE_INDEX]
    return {
        "targets": len(targets),
        "prompt_targets": sum(i not in answers for i in targets),
        "eos_targets": sum(ids[i] == eos for i in targets),
        "eos_tokens": ids.count(eos),
    }


def answer_only_widget(
    tokenizer: Any,
    messages: Sequence[dict[str, str]],
    *,
    train_on: str = "assistant only",
    pad_is_eos: bool = False,
) -> LessonWidget:
    """A ``train on`` toggle (:data:`TRAIN_ON`) and a ``pad = eos`` checkbox over ``messages``
    (a conversation that ends with an assistant turn). The output: the tokens with their labels,
    and how many targets there are, how many of them are prompt tokens and end-of-turn tokens.
    Its hidden state: ``train_on=assistant_only pad_is_eos=False targets=4 prompt_targets=0
    eos_targets=2``."""
    if train_on not in TRAIN_ON:
        raise ValueError(f"train_on must be one of {TRAIN_ON}, got {train_on!r}")
    row = conversation_labels(tokenizer, messages)  # checks the messages
    ids = row["input_ids"]
    answers = {i for i, m in enumerate(row["assistant_masks"]) if m}
    tokens = tokenizer.convert_ids_to_tokens(ids)
    controls = {
        "train_on": widgets.ToggleButtons(
            options=list(TRAIN_ON),
            value=train_on,
            description="train on",
            style={"description_width": "80px", "button_width": "130px"},
        ),
        "pad_is_eos": widgets.Checkbox(
            value=bool(pad_is_eos),
            description="pad = eos (collator masks every eos)",
            style={"description_width": "initial"},
        ),
    }

    def draw() -> tuple[OutputRecord, ...]:
        mode, pad_eos = str(controls["train_on"].value), bool(controls["pad_is_eos"].value)
        row = conversation_labels(tokenizer, messages, train_on=mode, pad_is_eos=pad_eos)
        labels = row["labels"]
        s = _summary(tokenizer, ids, labels, answers)
        caption = (
            f"train on {mode}{', pad = eos' if pad_eos else ''}: {s['targets']} of {len(ids)} "
            f"tokens are targets; {s['prompt_targets']} of them are prompt tokens; "
            f"{s['eos_targets']} of the {s['eos_tokens']} end-of-turn tokens are targets"
        )
        state = (
            f"train_on={mode.replace(' ', '_')} pad_is_eos={pad_eos} targets={s['targets']} "
            f"prompt_targets={s['prompt_targets']} eos_targets={s['eos_targets']}"
        )
        return state_output(state), html_output(label_chips_html(tokens, labels, caption=caption))

    return LessonWidget(controls, draw)


def plot_answer_curves(
    axes: Sequence[Any],
    reported: Mapping[str, Sequence[float]],
    heldout: Mapping[str, Mapping[int, float]],
) -> Sequence[Any]:
    """Two panels: left, the training loss each run reports (its own targets, one value per
    step); right, the held-out answer loss of each run at the steps it was measured."""
    if len(axes) != 2:
        raise ValueError(f"axes must be two matplotlib axes, got {len(axes)}")
    left, right = axes
    for i, (name, values) in enumerate(reported.items()):
        left.plot(range(1, len(values) + 1), list(values), color=f"C{i}", lw=1.5, label=name)
    for i, (name, curve) in enumerate(heldout.items()):
        steps = sorted(curve)
        right.plot(steps, [curve[s] for s in steps], "o-", color=f"C{i}", lw=1.5, label=name)
    left.set_title("the loss each run reports", fontsize=10)
    right.set_title("held-out loss on the answer tokens", fontsize=10)
    for ax in axes:
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("loss (nats)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return axes
