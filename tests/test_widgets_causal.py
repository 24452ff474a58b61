"""Lessons 03/04 widgets and plots: set the controls' values, check what the output shows."""

from __future__ import annotations

import matplotlib
from _widgets import shown_html, shown_marker, shown_png

matplotlib.use("Agg")

import ipywidgets as widgets
import matplotlib.pyplot as plt
import pytest
import torch

from lmlessons.causality import causal_mask
from lmlessons.widgets.causal import (
    IGNORED,
    is_decoder_widget,
    label_strings,
    plot_attention,
    plot_logit_change,
    plot_loss_curves,
    position_marker,
    position_view,
    position_widget,
    shift_table_html,
    shifted_targets,
)

TOKENS = ["[CLS]", "the", "big", "dog", "runs", "home", "[SEP]"]


def _bidirectional(n: int) -> torch.Tensor:
    return torch.full((n, n), 1.0 / n)


# ------------------------------------------------------------------------------ shift tables


def test_shifted_targets_moves_labels_left():
    assert shifted_targets(["a", "b", "c"]) == ["b", "c", IGNORED]
    assert shifted_targets(["a", "b", "c"], 2) == ["c", IGNORED, IGNORED]
    assert shifted_targets(["a", IGNORED, "c"]) == [IGNORED, "c", IGNORED]
    with pytest.raises(ValueError, match="shift"):
        shifted_targets(["a"], -1)


def test_shift_table_shows_inputs_below_and_shifted_labels_above():
    html = shift_table_html(TOKENS)
    top, bottom = html.index("labels, as learned"), html.index("input_ids")
    assert top < bottom  # labels above inputs
    # the top row is the bottom row moved one to the left; the last cell is -100
    top_row = html[top:bottom]
    for tok in TOKENS[1:]:
        assert f">{tok}</td>" in top_row
    assert f">{TOKENS[0]}</td>" not in top_row
    assert (
        top_row.rstrip("</tr>").endswith(f">{IGNORED}</td>") or f">{IGNORED}</td></tr>" in top_row
    )


def test_shift_table_with_ignored_labels_and_double_shift():
    labels = [IGNORED, "the", "big", "dog", "runs", IGNORED, IGNORED]
    html = shift_table_html(TOKENS, labels, caption="padded")
    assert "padded" in html and html.count(f">{IGNORED}</td>") == 3
    double = shift_table_html(TOKENS, shift=2)
    assert "t + 2" in double and double.count(f">{IGNORED}</td>") == 2
    with pytest.raises(ValueError, match="one entry per input token"):
        shift_table_html(TOKENS, labels[:3])
    with pytest.raises(TypeError, match="input_tokens"):
        shift_table_html("the dog")


def test_label_strings_writes_ignored():
    class Tok:
        def convert_ids_to_tokens(self, i):
            return f"t{i}"

    assert label_strings(Tok(), torch.tensor([-100, 4, 5])) == [IGNORED, "t4", "t5"]
    with pytest.raises(ValueError, match="one row"):
        label_strings(Tok(), torch.tensor([[1, 2]]))


# ------------------------------------------------------------------------------ position view


@pytest.mark.parametrize("t", range(len(TOKENS)))
def test_position_view_causal(t):
    view = position_view(causal_mask(len(TOKENS)), TOKENS, t)
    assert view["sees"] == t + 1
    assert view["visible"] == [j <= t for j in range(len(TOKENS))]
    assert view["predicts"] == (TOKENS[t + 1] if t + 1 < len(TOKENS) else IGNORED)
    assert view["sees_answer"] is False


def test_position_view_bidirectional_sees_its_answer():
    view = position_view(_bidirectional(len(TOKENS)), TOKENS, 3)
    assert (
        view["sees"] == len(TOKENS) and view["sees_answer"] is True and view["predicts"] == "runs"
    )
    assert position_marker(view, is_decoder=False) == (
        "is_decoder=False position=3 sees=7 predicts=runs sees_answer=True"
    )
    with pytest.raises(ValueError, match="position"):
        position_view(causal_mask(len(TOKENS)), TOKENS, len(TOKENS))
    with pytest.raises(ValueError, match="shape"):
        position_view(causal_mask(3), TOKENS, 0)


# ------------------------------------------------------------------------------ lesson 03 widget


def test_position_widget_slider_moves_the_marker_table_and_heatmap():
    box = position_widget(TOKENS)
    slider = box.children[0]
    assert isinstance(slider, widgets.IntSlider) and slider.description == "position"
    assert box.controls["position"] is slider and (slider.min, slider.max, slider.value) == (
        0,
        6,
        3,
    )
    assert shown_marker(box) == "position=3 sees=4 predicts=runs sees_answer=False"
    png_before, html_before = shown_png(box), shown_html(box)
    assert "target of position 3" in html_before
    slider.value = 4  # what one ArrowRight press does in the browser
    assert shown_marker(box) == "position=4 sees=5 predicts=home sees_answer=False"
    assert "target of position 4" in shown_html(box) and shown_html(box) != html_before
    assert shown_png(box) and shown_png(box) != png_before
    slider.value = 6
    assert shown_marker(box) == f"position=6 sees=7 predicts={IGNORED} sees_answer=False"


def test_position_widget_with_labels_and_without_heatmap():
    labels = [IGNORED, "the", "big", "dog", "runs", "home", IGNORED]
    box = position_widget(TOKENS, label_tokens=labels, position=5, heatmap=False)
    assert shown_marker(box) == f"position=5 sees=6 predicts={IGNORED} sees_answer=False"
    assert shown_png(box) == ""
    with pytest.raises(ValueError, match="position"):
        position_widget(TOKENS, position=7)


# ------------------------------------------------------------------------------ lesson 04 widget


def test_is_decoder_widget_toggle_and_slider():
    n = len(TOKENS)
    box = is_decoder_widget(TOKENS, {True: causal_mask(n).float(), False: _bidirectional(n)})
    assert (
        isinstance(box.children[0], widgets.IntSlider) and box.children[0].description == "position"
    )
    assert box.controls["position"] is box.children[0]
    assert shown_marker(box) == "is_decoder=True position=3 sees=4 predicts=runs sees_answer=False"
    box.controls["position"].value = 4
    assert shown_marker(box) == "is_decoder=True position=4 sees=5 predicts=home sees_answer=False"
    png_causal = shown_png(box)
    box.controls["is_decoder"].value = False
    assert shown_marker(box) == "is_decoder=False position=4 sees=7 predicts=home sees_answer=True"
    assert "a leak" in shown_html(box) and shown_png(box) != png_causal
    box.controls["is_decoder"].value = True
    assert "answer is hidden" in shown_html(box)


def test_is_decoder_widget_counts_measured_zeros():
    # a measured pattern: tiny but nonzero weights count as visible, exact zeros do not
    n = len(TOKENS)
    p = causal_mask(n).float() / torch.arange(1, n + 1).unsqueeze(1)
    p[2, 5] = 1e-12
    box = is_decoder_widget(TOKENS, {True: p, False: _bidirectional(n)}, position=2)
    assert "sees=4" in shown_marker(box)


def test_is_decoder_widget_validates():
    n = len(TOKENS)
    with pytest.raises(ValueError, match="patterns"):
        is_decoder_widget(TOKENS, {True: causal_mask(n)})
    with pytest.raises(ValueError, match="shape"):
        is_decoder_widget(TOKENS, {True: causal_mask(n), False: causal_mask(n + 1)})
    with pytest.raises(TypeError, match="is_decoder"):
        is_decoder_widget(TOKENS, {True: causal_mask(n), False: causal_mask(n)}, is_decoder=1)


# ------------------------------------------------------------------------------ plots


def test_plots_draw():
    fig, axes = plt.subplots(1, 3)
    plot_attention(axes[0], causal_mask(len(TOKENS)), TOKENS, row=2, title="mask")
    assert len(axes[0].patches) == 2 and axes[0].get_title() == "mask"
    plot_logit_change(
        axes[1], {"causal": torch.tensor([0.0, 0.0, 2.0, 1.0, 1.0]), "leaky": torch.ones(5)}, 2
    )
    assert len(axes[1].containers) == 2  # one bar group per entry
    assert [b.get_height() for b in axes[1].containers[1]] == [1.0] * 5
    assert axes[1].get_yscale() == "log" and axes[1].get_ylim()[0] < 1.0
    fig2, ax2 = plt.subplots()
    plot_logit_change(
        ax2, {"causal": torch.zeros(3)}, 1, ["a", "b", "c"], log=True
    )  # all zero: stays linear
    assert ax2.get_yscale() == "linear" and [t.get_text() for t in ax2.get_xticklabels()] == [
        "a",
        "b",
        "c",
    ]
    plt.close(fig2)
    plot_loss_curves(axes[2], {"a": [3.0, 2.0, 1.0], "b": [3.0, 3.0, 3.0]}, reference=4.0)
    assert len(axes[2].lines) == 5  # 2 raw + 2 smoothed + reference
    with pytest.raises(ValueError, match="curves"):
        plot_loss_curves(axes[2], {})
    plt.close(fig)
