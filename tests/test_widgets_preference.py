"""Lesson 11 widget, table and plot over recorded preference runs (a made-up record, so the tests
do not depend on the shipped file's numbers)."""

from __future__ import annotations

import matplotlib
from _widgets import marker_fields, shown_marker

matplotlib.use("Agg")

import pytest

from lmlessons.course.preferences import RUN_LOSS_TYPES, preference_summary
from lmlessons.widgets.preference import (
    plot_preference_runs,
    preference_runs_widget,
    summary_table,
)


def _probe(chosen: float, rejected: float, prefers: float, accuracy: float) -> dict:
    return {
        "chosen_logps": chosen,
        "rejected_logps": rejected,
        "policy_prefers_chosen": prefers,
        "reward_accuracy": accuracy,
    }


def _record() -> dict:
    """Per loss type, beta and seed: the chosen log-prob rises by (seed + 1) then falls by
    2 * (type index) below where it started; the rejected one falls by 10."""
    runs = []
    for t, loss_type in enumerate(RUN_LOSS_TYPES):
        for beta in (0.1, 0.5):
            for seed in range(3):
                probes = [
                    _probe(-20.0, -25.0, 0.5, 0.0),
                    _probe(-20.0 + seed + 1, -30.0, 0.75, 1.0),
                    _probe(-20.0 - 2 * t, -35.0, 1.0, 1.0),
                ]
                runs.append({"loss_type": loss_type, "beta": beta, "seed": seed,
                             "loss": [0.7, 0.5], "steps": [0, 4, 8], "probes": probes})  # fmt: skip
    return {"runs": runs}


def test_summary_reads_means_spreads_and_peaks():
    summary = preference_summary(_record(), 0.1)
    assert list(summary) == list(RUN_LOSS_TYPES)
    hinge = summary["hinge"]  # index 2: ends 4 nats below its start
    assert hinge["start_chosen_logps"] == (-20.0, 0.0)
    assert hinge["peak_chosen_logps"] == (pytest.approx(-18.0), pytest.approx(1.0))
    assert hinge["chosen_logps"] == (-24.0, 0.0)
    assert hinge["margin"] == (11.0, 0.0)
    assert hinge["policy_prefers_chosen"] == (1.0, 0.0)


def test_summary_spread_is_the_std_over_seeds_not_the_half_range():
    record = _record()
    for run in record["runs"]:  # seeds end at -20, -19, -14: std 3.214..., half-range 3.0
        run["probes"][-1]["chosen_logps"] = [-20.0, -19.0, -14.0][run["seed"]]
    mean, spread = preference_summary(record, 0.1)["ipo"]["chosen_logps"]
    assert mean == pytest.approx(-53.0 / 3) and spread == pytest.approx((31 / 3) ** 0.5)
    assert "± 3.2" in summary_table(record, 0.1).splitlines()[2 + RUN_LOSS_TYPES.index("ipo")]


def test_table_has_a_row_per_loss_type():
    text = summary_table(_record(), 0.5)
    lines = text.splitlines()
    assert lines[0].startswith("beta=0.5") and "mean ± std over 3 seeds" in lines[0]
    assert [line.split()[0] for line in lines[2:]] == list(RUN_LOSS_TYPES)
    assert "-24.0 ± 0.0" in lines[2 + RUN_LOSS_TYPES.index("hinge")]


def test_unknown_run_raises():
    with pytest.raises(ValueError, match=r"beta=0\.3"):
        preference_summary(_record(), 0.3)


def test_plot_draws_three_panels():
    fig = plot_preference_runs(_record(), ["sigmoid", "simpo"], 0.1)
    axes = fig.get_axes()
    assert len(axes) == 3
    labels = [line.get_label() for line in axes[0].get_lines()]
    assert labels == ["sigmoid", "simpo"]


@pytest.mark.slow
def test_the_widget_follows_its_controls():
    box = preference_runs_widget(_record(), loss_types=("sigmoid",), beta=0.1)
    assert marker_fields(shown_marker(box)) == {"beta": "0.1", "loss_types": "sigmoid"}
    box.controls["ipo"].value = True
    box.controls["beta"].value = 0.5
    assert marker_fields(shown_marker(box)) == {"beta": "0.5", "loss_types": "sigmoid,ipo"}
    assert any("image/png" in o.get("data", {}) for o in box.output.outputs)
    box.controls["sigmoid"].value = False
    box.controls["ipo"].value = False
    assert marker_fields(shown_marker(box))["loss_types"] == "none"
    assert "beta=0.5" in box.static_html()


def test_the_widget_rejects_bad_arguments():
    with pytest.raises(ValueError, match="beta"):
        preference_runs_widget(_record(), beta=0.2)
    with pytest.raises(ValueError, match="loss_types"):
        preference_runs_widget(_record(), loss_types=("dpo",))


@pytest.mark.parametrize(
    ("before", "after", "answer"),
    [(-4.0, -4.0, "none: it stayed or widened"), (-4.0, -5.0, "none: it stayed or widened"),
     (-4.0, -2.7, "less than half of it"), (-4.0, -2.0, "half of it or more"),
     (-4.0, 1.0, "half of it or more"), (-1, -0.9, "less than half of it")],
)  # fmt: skip
def test_prefer_reveal_reads_the_answer_off_the_measured_gaps(before, after, answer) -> None:
    from lmlessons.widgets.preference import PREFER_CHOICES, prefer_reveal

    measured, why = prefer_reveal(before, after)
    assert measured == answer and measured in PREFER_CHOICES
    assert "not where it stands" in why


@pytest.mark.parametrize(
    ("before", "after", "name"),
    [(0.0, -1.0, "gap_before"), (1.0, 2.0, "gap_before"), (True, -1.0, "gap_before"),
     (-1.0, "0", "gap_after"), (-1.0, None, "gap_after")],
)  # fmt: skip
def test_prefer_reveal_rejects_bad_gaps(before, after, name) -> None:
    from lmlessons.widgets.preference import prefer_reveal

    with pytest.raises((TypeError, ValueError), match=name):
        prefer_reveal(before, after)
