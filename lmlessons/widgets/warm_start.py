"""Lesson 02: the recorded probes of a tiny BERT trained with and without a causal warm start.

:func:`plot_warm_start` draws :func:`lmlessons.course.checkpoints.warm_start_curves` as three
panels (held-out MLM loss, top-5 accuracy on masked tokens, attention uniformity) against the
optimizer step, optionally with the held-out loss of a predictor that uses no context (``floor``);
:func:`warm_start_table` prints the same numbers at a few steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["plot_warm_start", "warm_start_table"]

PANELS = (
    ("mlm_loss", "held-out MLM loss (nats)"),
    ("mlm_top5_accuracy", "top-5 accuracy, masked tokens"),
    ("attention_uniformity", "attention uniformity (1 = uniform)"),
)
LABELS = {"scratch": "MLM + NSP from random weights", "warm": "causal warm start, then MLM + NSP"}


def _runs(curves: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    runs = {run["arm"]: run for run in curves.get("runs", [])}
    if set(runs) != set(LABELS):
        raise ValueError(f"curves must hold the runs {sorted(LABELS)}, got {sorted(runs)}")
    return runs


def _series(run: Mapping[str, Any], key: str) -> tuple[list[int], list[float]]:
    """The run's probes of ``key`` from the end of its warm start on (MLM probes are meaningless
    while the weights are trained as a causal decoder)."""
    start = run["warm_start_steps"]
    points = [(s, p[key]) for s, p in zip(run["steps"], run["probes"]) if s >= start]
    return [s for s, _ in points], [v for _, v in points]


def plot_warm_start(curves: Mapping[str, Any], *, floor: float | None = None) -> Any:
    """Three panels, both runs, the warm start shaded; returns the matplotlib figure.

    ``floor``: the held-out MLM loss of a predictor that uses no context, drawn as a dotted line
    on the loss panel (None: not drawn)."""
    import matplotlib.pyplot as plt

    runs = _runs(curves)
    fig, axes = plt.subplots(1, 3, figsize=(10, 2.8), dpi=80)
    warm = runs["warm"]["warm_start_steps"]
    for ax, (key, title) in zip(axes, PANELS):
        ax.axvspan(0, warm, color="#eeeeee", label="causal warm start (no MLM)")
        for arm, color in (("scratch", "C7"), ("warm", "C1")):
            ax.plot(*_series(runs[arm], key), color=color, lw=2, marker=".", label=LABELS[arm])
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("optimizer step")
        ax.grid(alpha=0.3)
    axes[0].axhline(curves["uniform_mlm_loss"], color="gray", ls="--", lw=1, label="ln V")
    if floor is not None:
        axes[0].axhline(floor, color="C3", ls=":", lw=1.5, label="no context (floor)")
    axes[2].set_ylim(top=1.01)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, bbox_to_anchor=(0.5, -0.16))
    fig.tight_layout()
    return fig


def warm_start_table(curves: Mapping[str, Any], steps: Sequence[int]) -> str:
    """The probes of both runs at ``steps`` as aligned text (2 decimals; guesses as words)."""
    runs = _runs(curves)
    lines = [
        f"{'step':>5}  {'run':8} {'MLM loss':>8} {'top-5':>6} {'uniform':>7}  guesses for "
        + " / ".join(curves["probe_sentences"])
    ]
    for step in steps:
        for arm, run in runs.items():
            if step not in run["steps"] or step < run["warm_start_steps"]:
                continue
            p = run["probes"][run["steps"].index(step)]
            lines.append(
                f"{step:5d}  {arm:8} {p['mlm_loss']:8.2f} {p['mlm_top5_accuracy']:6.0%} "
                f"{p['attention_uniformity']:7.2f}  {' / '.join(p['guesses'])}"
            )
    return "\n".join(lines)
