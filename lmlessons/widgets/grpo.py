"""Lessons 12 and 13 (RL losses): the token weights of each GRPO ``loss_type``, the accumulation
window, and the recorded runs.

* :func:`token_weight_figure`: for completions of given lengths, the weight one token of each gets
  in the loss under each ``loss_type`` (left) and the weight of the whole completion (right).
* :func:`accumulation_table`: a generation batch split into micro-batches and optimizer windows
  (``gradient_accumulation_steps``, ``steps_per_generation``): the total weight each window's
  tokens get under each ``loss_type`` as TRL 1.16 scales them, and under the ``dapo`` scaling of
  older TRL (``num_items_in_batch`` of the whole generation batch); :func:`accumulation_widget`
  toggles its ``steps_per_generation``.
* :func:`runs_figure` and :func:`grpo_runs_widget`: the recorded runs of
  :func:`lmlessons.course.rl.recorded_runs`, mean completion length and logged loss against the
  step, the mean over seeds and the range; the widget picks the experiment and the loss types
  (a :class:`~lmlessons.widgets.base.LessonWidget`: a viewer without a kernel sees its picture).
* :func:`loss_start_figure`: the logged loss against ``beta`` times the logged KL.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as widgets
import torch

from lmlessons._checks import check_int
from lmlessons.course.rl import run_summary
from lmlessons.grpo import LOSS_TYPES, token_weights
from lmlessons.packing import pad
from lmlessons.widgets.base import LessonWidget
from lmlessons.widgets.display import (
    TABLE_OPEN,
    OutputRecord,
    figure_png,
    html_output,
    new_figure,
    png_output,
    state_output,
)

__all__ = [
    "ZERO_CHOICES",
    "zero_reveal",
    "token_weight_figure",
    "accumulation_table",
    "accumulation_widget",
    "runs_figure",
    "grpo_runs_widget",
    "loss_start_figure",
]

#: Lesson 12's prediction: at step 1 (every ratio 1, beta = 0, a length reward), which loss
#: types log 0?
ZERO_CHOICES = ("none of them", "grpo only", "grpo and dr_grpo", "all four")

_COLORS = {"grpo": "C0", "bnpo": "C1", "dr_grpo": "C2", "dapo": "C3"}
_STYLES = {"grpo": "-", "bnpo": "--", "dr_grpo": ":", "dapo": "-."}  # a second cue
# A third cue, so that identical runs (bnpo and dapo with one micro-batch a step) stay visible:
# a wide line under a narrow one, and markers at alternating steps.
_WIDTHS = {"grpo": 2.0, "bnpo": 4.0, "dr_grpo": 2.0, "dapo": 1.5}
_MARKERS = {"grpo": ("o", 0), "bnpo": ("s", 0), "dr_grpo": ("^", 1), "dapo": ("x", 2)}


def _mask(lengths: Sequence[int]) -> torch.Tensor:
    """The right-padded ``(B, C)`` completion mask of completions of ``lengths`` tokens."""
    lengths = [check_int("lengths", n, minimum=0) for n in lengths]
    if not lengths:
        raise ValueError("lengths must not be empty")
    return pad([[1] * n for n in lengths], 0)  # (B, C)


def token_weight_figure(
    lengths: Sequence[int], *, max_completion_length: int, num_items_in_batch: int | None = None
) -> Any:
    """Two panels of bars, one group per ``loss_type``, one bar per completion: left, the weight
    of one token of the completion in the micro-batch's loss; right, the completion's total
    weight (its tokens' weights added up). Returns the matplotlib figure (no pyplot)."""
    mask = _mask(lengths)  # (B, C)
    fig = new_figure(9.6, 2.8)
    left, right = fig.subplots(1, 2)
    weights = [  # (B, C) each
        token_weights(
            mask,
            loss_type=loss_type,
            max_completion_length=max_completion_length,
            num_items_in_batch=num_items_in_batch,
        )
        for loss_type in LOSS_TYPES
    ]
    width = 0.8 / len(lengths)
    for j, n in enumerate(lengths):
        per_token = [float(w[j].max()) if n else 0.0 for w in weights]
        total = [float(w[j].sum()) for w in weights]
        xs = [i + (j - (len(lengths) - 1) / 2) * width for i in range(len(LOSS_TYPES))]
        hatch = "" if j % 2 == 0 else "//"
        left.bar(xs, per_token, width, color=f"C{j + 4}", hatch=hatch, label=f"{n} tokens")
        right.bar(xs, total, width, color=f"C{j + 4}", hatch=hatch, label=f"{n} tokens")
    for ax, title in ((left, "weight of one token"), (right, "weight of the whole completion")):
        ax.set_xticks(range(len(LOSS_TYPES)), LOSS_TYPES)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    left.legend(fontsize=8, title="completion", title_fontsize=8)
    return fig


def _window_totals(
    mask: torch.Tensor, *, loss_type: str, ga: int, spg: int, max_len: int, old_dapo: bool
) -> list[float]:
    """The summed token weight of each optimizer window, as TRL scales each micro-batch."""
    n_gen = float(mask.sum())
    per_micro = []
    for micro in mask.chunk(spg, dim=0):  # (B / S, C) each
        if loss_type == "dapo":
            count = n_gen if old_dapo else n_gen * ga / spg  # grpo_trainer.py:3170-3172
            w = token_weights(micro, loss_type="dapo", num_items_in_batch=count)  # (b, C)
        else:
            w = token_weights(micro, loss_type=loss_type, max_completion_length=max_len) / ga
        per_micro.append(float(w.sum()))
    return [sum(per_micro[i : i + ga]) for i in range(0, len(per_micro), ga)]


def accumulation_table(
    lengths: Sequence[int],
    *,
    gradient_accumulation_steps: int,
    steps_per_generation: int,
    max_completion_length: int,
) -> str:
    """A text table: a generation batch of completions of ``lengths`` tokens cut into
    ``steps_per_generation`` micro-batches, an optimizer step every
    ``gradient_accumulation_steps`` of them; for each ``loss_type`` (and ``dapo`` as TRL scaled
    it before 1.16's fix), the total weight the tokens of each optimizer window get: with every
    token loss equal to 1, the loss that window's step minimises."""
    ga = check_int("gradient_accumulation_steps", gradient_accumulation_steps, minimum=1)
    spg = check_int("steps_per_generation", steps_per_generation, minimum=1)
    mask = _mask(lengths)  # (B, C)
    if mask.shape[0] % spg or spg % ga:
        raise ValueError(
            "len(lengths) must be a multiple of steps_per_generation, and steps_per_generation "
            "a multiple of gradient_accumulation_steps"
        )
    rows = [(t, t, False) for t in LOSS_TYPES] + [("dapo (older TRL)", "dapo", True)]
    lines = [f"{'loss_type':18s} total weight of each optimizer window"]
    for name, loss_type, old in rows:
        totals = _window_totals(
            mask, loss_type=loss_type, ga=ga, spg=spg, max_len=max_completion_length, old_dapo=old
        )
        lines.append(f"{name:18s} " + "  ".join(f"{t:.4f}" for t in totals))
    return "\n".join(lines)


def accumulation_widget(
    lengths: Sequence[int],
    *,
    gradient_accumulation_steps: int = 2,
    max_completion_length: int = 16,
    options: Sequence[int] = (2, 4, 8),
) -> LessonWidget:
    """A ``steps_per_generation`` toggle over :func:`accumulation_table`. Its hidden state:
    ``steps_per_generation=4 gradient_accumulation_steps=2 windows=2`` (``windows``: the
    optimizer steps one generation batch serves)."""
    ga = check_int("gradient_accumulation_steps", gradient_accumulation_steps, minimum=1)
    choices = [check_int("options", o, minimum=1) for o in options]
    if not choices or any(o % ga or len(lengths) % o for o in choices):
        raise ValueError(
            f"options must be multiples of gradient_accumulation_steps={ga} that divide "
            f"len(lengths)={len(lengths)}"
        )
    toggle = widgets.ToggleButtons(
        options=choices,
        value=choices[0],
        description="steps_per_generation",
        style={"button_width": "50px", "description_width": "150px"},
    )

    def draw() -> tuple[OutputRecord, ...]:
        spg = int(toggle.value)
        table = accumulation_table(
            lengths,
            gradient_accumulation_steps=ga,
            steps_per_generation=spg,
            max_completion_length=max_completion_length,
        )
        state = f"steps_per_generation={spg} gradient_accumulation_steps={ga} windows={spg // ga}"
        return state_output(state), html_output(f"<pre>{html.escape(table)}</pre>", table)

    return LessonWidget({"steps_per_generation": toggle}, draw)


def _runs_by_type(data: Mapping[str, Any], experiment: str) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {}
    for run in data["experiments"][experiment]["runs"]:
        runs.setdefault(run["loss_type"], []).append(run)
    return runs


def _band(ax: Any, runs: Sequence[Mapping[str, Any]], metric: str, loss_type: str) -> None:
    """The mean over the seeds as a line, their range shaded."""
    series = torch.tensor([r[metric] for r in runs], dtype=torch.float64)  # (seeds, steps)
    steps = range(1, series.shape[1] + 1)
    color, style = _COLORS.get(loss_type, "C7"), _STYLES.get(loss_type, "-")
    marker, start = _MARKERS.get(loss_type, ("", 0))
    ax.plot(steps, series.mean(0).tolist(), color=color, ls=style, lw=_WIDTHS.get(loss_type, 2),
            marker=marker, markevery=(start, 4), label=loss_type)  # fmt: skip
    ax.fill_between(steps, series.min(0).values.tolist(), series.max(0).values.tolist(),
                    color=color, alpha=0.15)  # fmt: skip


def runs_figure(data: Mapping[str, Any], experiment: str, loss_types: Sequence[str]) -> Any:
    """Two panels for the recorded ``experiment``: mean completion length and TRL's logged loss
    against the step, one line per loss type (the mean over seeds, the range shaded)."""
    runs = _runs_by_type(data, experiment)
    fig = new_figure(9.6, 2.9)
    axes = fig.subplots(1, 2)
    for loss_type in loss_types:
        for ax, metric in zip(axes, ("mean_length", "loss")):
            _band(ax, runs[loss_type], metric, loss_type)
    reward = data["experiments"][experiment]["reward"]
    axes[0].set_title(f"mean completion length (tokens), reward: {reward}", fontsize=10)
    axes[1].set_title("the loss TRL logs", fontsize=10)
    for ax in axes:
        ax.set_xlabel("optimizer step")
        ax.grid(alpha=0.3)
    if loss_types:
        axes[0].legend(fontsize=8)
    return fig


def _summary_html(data: Mapping[str, Any], experiment: str, loss_types: Sequence[str]) -> str:
    last = 5
    summary = run_summary(dict(data), experiment, last=last)
    seeds = len(data["settings"]["seeds"])
    head = (
        f"<tr><th>loss_type</th><th>length at step 1</th><th>mean length, last {last} steps "
        f"(mean &plusmn; std over {seeds} seeds)</th></tr>"
    )
    rows = "".join(
        f"<tr><td>{html.escape(t)}</td><td>{summary[t]['first']:.1f}</td>"
        f"<td>{summary[t]['final']:.1f} &plusmn; {summary[t]['std']:.1f}</td></tr>"
        for t in loss_types
    )
    return f"{TABLE_OPEN}{head}{rows}</table>"


def grpo_runs_widget(
    data: Mapping[str, Any], *, experiment: str = "shorter", loss_types: Sequence[str] = LOSS_TYPES
) -> LessonWidget:
    """An ``experiment`` toggle (``shorter``, ``longer``) and one checkbox per loss type over the
    recorded runs: :func:`runs_figure` and the mean length of the last 5 steps over the seeds.
    Its hidden state: ``experiment=shorter loss_types=grpo,dapo``."""
    options = [e for e in ("shorter", "longer") if e in data["experiments"]]
    if experiment not in options:
        raise ValueError(f"experiment must be one of {options}, got {experiment!r}")
    controls: dict[str, widgets.ValueWidget] = {
        "experiment": widgets.ToggleButtons(
            options=options, value=experiment, description="reward", style={"button_width": "90px"}
        )
    }
    for t in LOSS_TYPES:
        controls[t] = widgets.Checkbox(
            value=t in loss_types, description=t, indent=False, layout={"width": "90px"}
        )

    def draw() -> tuple[OutputRecord, ...]:
        name = str(controls["experiment"].value)
        shown = [t for t in LOSS_TYPES if controls[t].value]
        png = figure_png(runs_figure(data, name, shown))
        alt = f"mean length and logged loss of the {name} runs: {', '.join(shown) or 'none'}"
        return (
            state_output(f"experiment={name} loss_types={','.join(shown) or 'none'}"),
            html_output(_summary_html(data, name, shown)),
            png_output(png, alt),
        )

    rows = [controls["experiment"], widgets.HBox([controls[t] for t in LOSS_TYPES])]
    return LessonWidget(controls, draw, rows=rows)


def loss_start_figure(data: Mapping[str, Any]) -> Any:
    """The ``loss_start`` runs: TRL's logged loss (line) and ``beta`` times its logged KL
    (dotted), the mean over the seeds, one colour per ``(loss_type, beta)``."""
    fig = new_figure(6.4, 2.9)
    ax = fig.subplots(1, 1)
    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for run in data["experiments"]["loss_start"]["runs"]:
        groups.setdefault((run["loss_type"], run["beta"]), []).append(run)
    for i, ((loss_type, beta), runs) in enumerate(groups.items()):
        loss = torch.tensor([r["loss"] for r in runs]).mean(0)  # (steps,)
        steps = range(1, loss.shape[0] + 1)
        ax.plot(steps, loss.tolist(), color=f"C{i}", lw=2, label=f"{loss_type}, beta={beta:g}")
        if beta > 0:
            kl = torch.tensor([r["kl"] for r in runs]).mean(0) * beta  # (steps,)
            ax.plot(
                steps, kl.tolist(), color=f"C{i}", ls=":", lw=2, label=f"beta x KL ({loss_type})"
            )
    ax.axhline(0.0, color="gray", lw=0.8)
    ax.set_xlabel("optimizer step")
    ax.set_title("the loss TRL logs, mean over seeds", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def zero_reveal(step1: Mapping[str, float], *, tolerance: float = 1e-6) -> tuple[str, str]:
    """The measured answer to :data:`ZERO_CHOICES` and its explanation, from the step-1 loss TRL
    logged for each ``loss_type`` (kept here so that the lesson's visible code does not give it)."""
    missing = [t for t in LOSS_TYPES if t not in step1]
    if missing:
        raise ValueError(f"step1 must hold the loss of every loss_type, missing {missing}")
    zero = tuple(t for t in LOSS_TYPES if abs(float(step1[t])) < tolerance)
    named = dict(zip(((), ("grpo",), ("grpo", "dr_grpo"), LOSS_TYPES), ZERO_CHOICES, strict=True))
    if zero not in named:
        raise ValueError(f"no choice describes the loss types that logged 0: {zero}")
    answer = named[zero]
    why = (
        "With every ratio 1 and beta = 0, each token's loss is minus its completion's advantage. "
        "grpo weighs every completion 1/B, so its loss is minus the mean advantage, and the "
        "advantages of a group add up to 0: the loss is 0 whatever the rewards. The token-level "
        "types weigh a completion by its length, so they log minus a length-weighted mean of the "
        "advantages, which is 0 only when the advantages do not correlate with length."
    )
    return answer, why
