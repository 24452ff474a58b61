"""Lesson 10 widget and plot: set the controls' values, check what the output shows."""

from __future__ import annotations

import matplotlib
from _widgets import marker_fields, shown_html, shown_marker

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest

from lmlessons.course.chat import TRAIN_ON
from lmlessons.widgets.answer_only import answer_only_widget, label_chips_html, plot_answer_curves

MESSAGES = [
    {"role": "user", "content": "Which topic? The dog ran home."},
    {"role": "assistant", "content": "animals"},
    {"role": "user", "content": "First word? The sea was calm."},
    {"role": "assistant", "content": "the"},
]


def test_chips_show_each_token_with_its_label():
    markup = label_chips_html(["[CLS]", "dog", "[SEP]"], [-100, 7, 3], caption="two targets")
    assert "two targets" in markup and markup.count("<br>") == 3
    assert ">dog<br>" in markup and ">7</span>" in markup and ">-100</span>" in markup
    assert "&lt;" not in label_chips_html(["a"], [1]) and "&lt;b&gt;" in label_chips_html(
        ["<b>"], [1]
    )
    with pytest.raises(ValueError, match="one entry per token"):
        label_chips_html(["a", "b"], [1])


def test_the_widget_follows_its_controls(chat_tok):
    box = answer_only_widget(chat_tok, MESSAGES)
    state = marker_fields(shown_marker(box))
    assert state == {
        "train_on": "assistant_only",
        "pad_is_eos": "False",
        "targets": "4",
        "prompt_targets": "0",
        "eos_targets": "2",
    }
    assert "4 of" in shown_html(box)
    box.controls["train_on"].value = "completion only"
    assert marker_fields(shown_marker(box))["targets"] == "2"
    box.controls["train_on"].value = "everything"
    state = marker_fields(shown_marker(box))
    n_tokens = len(chat_tok.apply_chat_template(MESSAGES)["input_ids"])
    assert state["targets"] == str(n_tokens) and int(state["prompt_targets"]) == n_tokens - 4
    box.controls["train_on"].value = "assistant only"
    box.controls["pad_is_eos"].value = True
    state = marker_fields(shown_marker(box))
    assert (state["targets"], state["eos_targets"]) == ("2", "0")
    picture = box.static_html()
    assert "pad = eos" in picture and "animals" in picture  # the kernel-free picture of the state
    with pytest.raises(ValueError, match="train_on"):
        answer_only_widget(chat_tok, MESSAGES, train_on="all")


def test_every_choice_is_a_state(chat_tok):
    seen = set()
    box = answer_only_widget(chat_tok, MESSAGES)
    for mode in TRAIN_ON:
        for pad in (False, True):
            box.controls["train_on"].value, box.controls["pad_is_eos"].value = mode, pad
            seen.add(shown_marker(box))
    assert len(seen) == 2 * len(TRAIN_ON)


def test_plot_answer_curves_draws_both_panels():
    fig, axes = plt.subplots(1, 2)
    plot_answer_curves(
        axes, {"a": [3.0, 2.0], "b": [4.0, 3.5]}, {"a": {0: 5.0, 2: 2.5}, "b": {0: 5.0, 2: 3.0}}
    )
    assert len(axes[0].lines) == 2 and len(axes[1].lines) == 2
    assert list(axes[1].lines[0].get_xdata()) == [0, 2]
    with pytest.raises(ValueError, match="two matplotlib axes"):
        plot_answer_curves([axes[0]], {}, {})
    plt.close(fig)
