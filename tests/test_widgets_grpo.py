"""Lessons 12 and 13: the token-weight plot, the accumulation table and widget, the runs."""

from __future__ import annotations

import html

import matplotlib
from _widgets import marker_fields, shown_html, shown_marker, shown_png

matplotlib.use("Agg")

import pytest

from lmlessons.course.rl import recorded_runs
from lmlessons.grpo import LOSS_TYPES
from lmlessons.widgets.grpo import (
    accumulation_table,
    accumulation_widget,
    grpo_runs_widget,
    loss_start_figure,
    runs_figure,
    token_weight_figure,
)


def _bar_heights(fig):
    left, right = fig.axes
    return [p.get_height() for p in left.patches], [p.get_height() for p in right.patches]


def test_token_weight_bars_are_the_weights_of_each_loss_type():
    per_token, total = _bar_heights(token_weight_figure([2, 8], max_completion_length=16))
    # bars: the 2-token completion under grpo, bnpo, dr_grpo, dapo, then the 8-token one
    assert per_token == pytest.approx(
        [1 / 4, 1 / 10, 1 / 32, 1 / 10, 1 / 16, 1 / 10, 1 / 32, 1 / 10]
    )
    assert total == pytest.approx([1 / 2, 2 / 10, 2 / 32, 2 / 10, 1 / 2, 8 / 10, 8 / 32, 8 / 10])
    per_token, _ = _bar_heights(token_weight_figure([2, 8], max_completion_length=16,
                                                    num_items_in_batch=20))  # fmt: skip
    assert per_token[3] == pytest.approx(1 / 20) and per_token[1] == pytest.approx(1 / 10)


def _table(text):
    rows = {}
    for line in text.splitlines()[1:]:
        rows[line[:18].strip()] = [float(v) for v in line[18:].split()]
    return rows


def test_accumulation_table_scales_dapo_to_the_window():
    lengths = [2, 4, 8, 16, 3, 5, 7, 9]
    one = _table(accumulation_table(lengths, gradient_accumulation_steps=2,
                                    steps_per_generation=2, max_completion_length=16))  # fmt: skip
    assert one["dapo"] == [1.0] and one["dapo (older TRL)"] == [1.0] and one["bnpo"] == [1.0]
    two = _table(accumulation_table(lengths, gradient_accumulation_steps=2,
                                    steps_per_generation=4, max_completion_length=16))  # fmt: skip
    first, second = sum(lengths[:4]), sum(lengths[4:])
    half = (first + second) / 2
    assert two["dapo"] == pytest.approx([round(first / half, 4), round(second / half, 4)])
    assert sum(two["dapo (older TRL)"]) == pytest.approx(1.0, abs=1e-3)
    assert two["grpo"] == [1.0, 1.0]
    with pytest.raises(ValueError, match="multiple"):
        accumulation_table(lengths, gradient_accumulation_steps=3, steps_per_generation=4,
                           max_completion_length=16)  # fmt: skip


def test_runs_widget_follows_its_controls():
    data = recorded_runs()
    box = grpo_runs_widget(data)
    assert marker_fields(shown_marker(box)) == {
        "experiment": "shorter", "loss_types": ",".join(LOSS_TYPES)
    }  # fmt: skip
    assert "mean length, last 5 steps" in shown_html(box) and shown_png(box)
    box.controls["bnpo"].value = False
    box.controls["experiment"].value = "longer"
    assert marker_fields(shown_marker(box)) == {
        "experiment": "longer", "loss_types": "grpo,dr_grpo,dapo"
    }  # fmt: skip
    assert ">bnpo<" not in shown_html(box) and ">grpo<" in shown_html(box)
    assert "experiment=longer" in box.static_text() or "reward=longer" in box.static_text()
    with pytest.raises(ValueError, match="experiment"):
        grpo_runs_widget(data, experiment="loss_start")


def test_run_and_loss_start_figures_draw_one_line_per_run_type():
    data = recorded_runs()
    fig = runs_figure(data, "shorter", ["grpo", "dapo"])
    assert [len(ax.lines) for ax in fig.axes] == [2, 2]
    fig = loss_start_figure(data)
    labels = [line.get_label() for line in fig.axes[0].lines]
    assert "grpo, beta=0.04" in labels and "dapo, beta=0" in labels
    assert sum(label.startswith("beta x KL") for label in labels) == 2


def test_identical_runs_stay_visible_one_under_the_other():
    """bnpo and dapo are the same run with one micro-batch a step: bnpo is drawn wider, and
    their markers sit on different steps, so neither line hides the other."""
    fig = runs_figure(recorded_runs(), "shorter", ["bnpo", "dapo"])
    bnpo, dapo = fig.axes[0].lines
    assert bnpo.get_ydata().tolist() == dapo.get_ydata().tolist()  # the same values...
    assert bnpo.get_linewidth() > dapo.get_linewidth() + 1  # ...drawn one under the other
    assert bnpo.get_marker() != dapo.get_marker()
    assert bnpo.get_markevery() != dapo.get_markevery()


@pytest.mark.parametrize(
    ("step1", "answer"),
    [
        ({"grpo": 2e-8, "bnpo": -0.2, "dr_grpo": -0.1, "dapo": -0.2}, "grpo only"),
        ({"grpo": 0.0, "bnpo": 0.0, "dr_grpo": 0.0, "dapo": 0.0}, "all four"),
        ({"grpo": 0.3, "bnpo": -0.2, "dr_grpo": -0.1, "dapo": -0.2}, "none of them"),
        ({"grpo": 0.0, "bnpo": -0.2, "dr_grpo": 0.0, "dapo": -0.2}, "grpo and dr_grpo"),
    ],
)
def test_zero_reveal_reads_the_answer_off_the_step_1_losses(step1, answer) -> None:
    from lmlessons.widgets.grpo import ZERO_CHOICES, zero_reveal

    measured, why = zero_reveal(step1)
    assert measured == answer and measured in ZERO_CHOICES
    assert "advantages of a group add up to 0" in why


def test_zero_reveal_needs_every_loss_type() -> None:
    from lmlessons.widgets.grpo import zero_reveal

    with pytest.raises(ValueError, match="step1 must hold the loss of every loss_type"):
        zero_reveal({"grpo": 0.0})


def test_zero_reveal_names_no_choice_for_an_unforeseen_set() -> None:
    from lmlessons.widgets.grpo import zero_reveal

    with pytest.raises(ValueError, match="no choice describes"):
        zero_reveal({"grpo": 0.1, "bnpo": 0.0, "dr_grpo": -0.1, "dapo": -0.2})


def test_accumulation_widget_redraws_the_table_for_each_steps_per_generation():
    lengths = [2, 4, 8, 16, 3, 5, 7, 9]
    box = accumulation_widget(lengths)
    assert marker_fields(shown_marker(box)) == {
        "steps_per_generation": "2", "gradient_accumulation_steps": "2", "windows": "1"
    }  # fmt: skip
    box.controls["steps_per_generation"].value = 8
    assert marker_fields(shown_marker(box))["windows"] == "4"
    table = accumulation_table(
        lengths, gradient_accumulation_steps=2, steps_per_generation=8, max_completion_length=16
    )
    assert html.unescape(shown_html(box)) == f"<pre>{table}</pre>"
    assert len(_table(table)["dapo"]) == 4
    with pytest.raises(ValueError, match="divide"):
        accumulation_widget(lengths[:6])
    with pytest.raises(ValueError, match="multiples"):
        accumulation_widget(lengths, gradient_accumulation_steps=4)
