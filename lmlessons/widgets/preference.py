"""Lesson 11: the recorded preference runs (:func:`lmlessons.course.preferences.preference_runs`).

* :func:`run_summary`: per loss type at one ``beta``, the mean and the spread over the seeds of
  what a run ends with: the chosen and rejected log-probabilities, their gap, the highest
  chosen log-probability along the way, the policy's own preference and TRL's
  ``rewards/accuracies``;
* :func:`summary_table`: the same as aligned text;
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

from lmlessons.course.preferences import RUN_LOSS_TYPES
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
    "run_summary",
    "summary_table",
    "plot_preference_runs",
    "preference_runs_widget",
]

#: Lesson 11's prediction: on the live run's pairs where the reference prefers the rejected
#: answer, how much of their mean log-prob gap have the ten steps closed?
PREFER_CHOICES = ("none: it stayed or widened", "less than half of it", "half of it or more")

LINE_STYLES = {"sigmoid": "-", "ipo": "--", "hinge": "-.", "sigmoid_norm": ":", "simpo": "-"}
MARKERS = {"sigmoid": "o", "ipo": "s", "hinge": "^", "sigmoid_norm": "D", "simpo": "x"}


def _runs(record: Mapping[str, Any], loss_type: str, beta: float) -> list[Mapping[str, Any]]:
    runs = [r for r in record["runs"] if r["loss_type"] == loss_type and r["beta"] == beta]
    if not runs:
        raise ValueError(f"no recorded run of loss_type={loss_type!r} with beta={beta}")
    return runs


def _series(runs: Sequence[Mapping[str, Any]], key: str) -> list[list[float]]:
    """``key`` at each probe, one list per run; ``margin`` is the log-prob gap, the chosen minus
    the rejected summed log-probability (the reference's own gap included)."""
    if key == "margin":
        return [[p["chosen_logps"] - p["rejected_logps"] for p in r["probes"]] for r in runs]
    return [[p[key] for p in r["probes"]] for r in runs]


def _mean_spread(values: Sequence[float]) -> tuple[float, float]:
    """Mean and half the range (max - min) / 2 over the seeds."""
    return statistics.fmean(values), (max(values) - min(values)) / 2


def run_summary(
    record: Mapping[str, Any], beta: float
) -> dict[str, dict[str, tuple[float, float]]]:
    """Per loss type: ``{quantity: (mean over seeds, half-range over seeds)}`` at the last probe
    (``peak_chosen_logps``: the highest chosen log-probability of the run, ``start_chosen_logps``:
    before the first step)."""
    out = {}
    for loss_type in RUN_LOSS_TYPES:
        runs = _runs(record, loss_type, beta)
        chosen = _series(runs, "chosen_logps")
        values = {
            "start_chosen_logps": [c[0] for c in chosen],
            "peak_chosen_logps": [max(c) for c in chosen],
            "chosen_logps": [c[-1] for c in chosen],
            "rejected_logps": [r[-1] for r in _series(runs, "rejected_logps")],
            "margin": [m[-1] for m in _series(runs, "margin")],
            "policy_prefers_chosen": [p[-1] for p in _series(runs, "policy_prefers_chosen")],
            "reward_accuracy": [a[-1] for a in _series(runs, "reward_accuracy")],
        }
        out[loss_type] = {k: _mean_spread(v) for k, v in values.items()}
    return out


def summary_table(record: Mapping[str, Any], beta: float) -> str:
    """:func:`run_summary` as aligned text: mean ± half-range over the seeds."""
    summary = run_summary(record, beta)
    seeds = len(_runs(record, RUN_LOSS_TYPES[0], beta))
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
        f"beta={beta}, mean ± half-range over {seeds} seeds; start: chosen "
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
        runs = _runs(record, loss_type, beta)
        steps, color = runs[0]["steps"], f"C{RUN_LOSS_TYPES.index(loss_type)}"
        keys = ("chosen_logps", "margin", "policy_prefers_chosen")
        for ax, key in zip(axes, keys):
            series = _series(runs, key)
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
        accuracy = [statistics.fmean(v) for v in zip(*_series(runs, "reward_accuracy"))]
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
