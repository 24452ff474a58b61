"""Lesson 11: the recorded preference runs (:func:`lmlessons.course.preferences.preference_runs`).

* :func:`summary_table`: per loss type at one ``beta``, the mean and the spread over the seeds
  (:func:`lmlessons.course.preferences.preference_summary`) of what a run ends with, as aligned
  text: the chosen and rejected log-probabilities, their gap, the highest chosen
  log-probability along the way, the policy's own preference and TRL's ``rewards/accuracies``;
* :func:`plot_preference_runs`: three panels against the optimizer step (the chosen
  log-probability, the log-prob gap chosen minus rejected, the policy's own preference beside the
  reward accuracy), one line per loss type, the seeds' range shaded;
* :func:`preference_runs_widget`: loss types and ``beta`` to pick, the plot and the table redrawn.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as widgets

from lmlessons.course.preferences import (
    RUN_LOSS_TYPES,
    preference_summary,
    probe_series,
    select_runs,
)
from lmlessons.widgets.base import LessonWidget
from lmlessons.widgets.display import (
    OutputRecord,
    figure_png,
    new_figure,
    png_output,
    state_output,
    stream,
)

__all__ = [
    "PREFER_CHOICES",
    "prefer_reveal",
    "summary_table",
    "plot_preference_runs",
    "preference_runs_widget",
]

#: Lesson 11's prediction: on the live run's pairs where the reference prefers the rejected
#: answer, how much of their mean log-prob gap have the ten steps closed?
PREFER_CHOICES = ("none: it stayed or widened", "less than half of it", "half of it or more")

LINE_STYLES = {"sigmoid": "-", "ipo": "--", "hinge": "-.", "sigmoid_norm": ":", "simpo": "-"}
MARKERS = {"sigmoid": "o", "ipo": "s", "hinge": "^", "sigmoid_norm": "D", "simpo": "x"}


def summary_table(record: Mapping[str, Any], beta: float) -> str:
    """:func:`lmlessons.course.preferences.preference_summary` as aligned text: mean ± std over
    the seeds."""
    summary = preference_summary(dict(record), beta)
    seeds = len(select_runs(dict(record), RUN_LOSS_TYPES[0], beta))
    columns = (
        ("peak_chosen_logps", "chosen: peak", ".1f"),
        ("chosen_logps", "chosen: end", ".1f"),
        ("rejected_logps", "rejected: end", ".1f"),
        ("margin", "log-prob gap", ".1f"),
        ("policy_prefers_chosen", "prefers chosen", ".0%"),
        ("reward_accuracy", "rewards/acc.", ".0%"),
    )
    head = f"{'loss type':13s}" + "".join(f"{title:>17s}" for _, title, _ in columns)
    lines = [
        f"beta={beta}, mean ± std over {seeds} seeds; start: chosen "
        f"{summary['sigmoid']['start_chosen_logps'][0]:.1f}",
        head,
    ]
    for loss_type, row in summary.items():
        cells = "".join(
            f"{format(row[key][0], fmt) + ' ± ' + format(row[key][1], fmt):>17s}"
            for key, _, fmt in columns
        )
        lines.append(f"{loss_type:13s}{cells}")
    return "\n".join(lines)


def plot_preference_runs(record: Mapping[str, Any], loss_types: Sequence[str], beta: float) -> Any:
    """Three panels against the optimizer step, one line (mean over seeds, range shaded) per loss
    type: the chosen log-probability, the margin, and the policy's own preference (solid) beside
    ``rewards/accuracies`` (dotted). Returns the figure (not shown: see ``figure_png``)."""
    fig = new_figure(10, 2.9)
    axes = fig.subplots(1, 3)
    titles = (
        "chosen log-prob (summed, nats)",
        "log-prob gap: chosen - rejected (nats)",
        "policy prefers chosen (solid),\nrewards/accuracies (dotted)",
    )
    for loss_type in loss_types:
        runs = select_runs(dict(record), loss_type, beta)
        steps, color = runs[0]["steps"], f"C{RUN_LOSS_TYPES.index(loss_type)}"
        keys = ("chosen_logps", "margin", "policy_prefers_chosen")
        for ax, key in zip(axes, keys):
            series = probe_series(runs, key)
            mean = [statistics.fmean(v) for v in zip(*series)]
            ax.fill_between(
                steps,
                [min(v) for v in zip(*series)],
                [max(v) for v in zip(*series)],
                color=color,
                alpha=0.2,
                lw=0,
            )
            ax.plot(
                steps,
                mean,
                color=color,
                ls=LINE_STYLES[loss_type],
                marker=MARKERS[loss_type],
                markevery=4,
                ms=4,
                label=loss_type,
            )
        accuracy = [statistics.fmean(v) for v in zip(*probe_series(runs, "reward_accuracy"))]
        axes[2].plot(steps, accuracy, color=color, ls=":", lw=1.2)
    for ax, title in zip(axes, titles):
        ax.set_title(title, fontsize=8)
        ax.set_xlabel("optimizer step", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    axes[2].set_ylim(0, 1.02)
    axes[0].legend(fontsize=7, loc="best")
    return fig


def preference_runs_widget(
    record: Mapping[str, Any],
    *,
    loss_types: Sequence[str] = ("sigmoid", "hinge"),
    beta: float | None = None,
) -> LessonWidget:
    """A checkbox per loss type of :data:`RUN_LOSS_TYPES` and a ``beta`` choice over the recorded
    runs; the output is :func:`plot_preference_runs` of the ticked loss types and
    :func:`summary_table`. Its hidden state: ``beta=0.1 loss_types=sigmoid,hinge``."""
    betas = sorted({float(r["beta"]) for r in record["runs"]})
    beta = betas[0] if beta is None else float(beta)
    if beta not in betas:
        raise ValueError(f"beta must be one of the recorded {betas}, got {beta}")
    for name in loss_types:
        if name not in RUN_LOSS_TYPES:
            raise ValueError(f"loss_types must be among {RUN_LOSS_TYPES}, got {name!r}")
    controls: dict[str, widgets.ValueWidget] = {
        name: widgets.Checkbox(
            value=name in loss_types,
            description=name,
            indent=False,
            layout=widgets.Layout(width="120px"),
        )
        for name in RUN_LOSS_TYPES
    }
    controls["beta"] = widgets.ToggleButtons(
        options=betas, value=beta, description="beta", style={"button_width": "60px"}
    )

    def draw() -> tuple[OutputRecord, ...]:
        picked = [n for n in RUN_LOSS_TYPES if controls[n].value]
        b = float(controls["beta"].value)
        state = f"beta={b} loss_types={','.join(picked) or 'none'}"
        records: list[OutputRecord] = [state_output(state)]
        if picked:
            png = figure_png(plot_preference_runs(record, picked, b))
            records.append(png_output(png, f"recorded runs, beta={b}: {', '.join(picked)}"))
        else:
            records.append(stream("tick at least one loss type"))
        records.append(stream(summary_table(record, b)))
        return tuple(records)

    rows = [widgets.HBox([controls[n] for n in RUN_LOSS_TYPES]), controls["beta"]]
    return LessonWidget(controls, draw, rows=rows)


def prefer_reveal(gap_before: float, gap_after: float) -> tuple[str, str]:
    """The measured answer to :data:`PREFER_CHOICES` and its explanation, from the mean log-prob
    gap (chosen minus rejected, nats) of the pairs on which the reference prefers the rejected
    answer, before (``gap_before`` < 0) and after lesson 11's live run (kept here so that the
    lesson's visible code does not give it)."""
    for name, value in (("gap_before", gap_before), ("gap_after", gap_after)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a number of nats, got {type(value).__name__}")
    if not gap_before < 0:
        raise ValueError(
            f"gap_before must be < 0 (the reference prefers rejected), got {gap_before}"
        )
    closed = (gap_after - gap_before) / -gap_before  # share of the gap closed
    answer = PREFER_CHOICES[0 if closed <= 0 else 1 if closed < 0.5 else 2]
    why = (
        "A reward is a log-ratio against the reference. Where the reference preferred the "
        "rejected answer by several nats, ten small steps raise the chosen log-ratio above the "
        "rejected one (a positive reward margin, a win for rewards/accuracies) long before they "
        "close the log-probability gap itself. The reward accuracy measures how the policy moved, "
        "not where it stands."
    )
    return answer, why
