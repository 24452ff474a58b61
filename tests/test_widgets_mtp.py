"""Lesson 15: the MTP depth widget, its rows, its counts and its picture."""

from __future__ import annotations

import html

import pytest
import torch
from _widgets import marker_fields, shown_html, shown_marker

from lmlessons.widgets.mtp import (
    IGNORED,
    mtp_count_text,
    mtp_label_rows,
    mtp_labels_widget,
    mtp_table_html,
)

IGNORE = -100
TOKENS = ["a", "b", "c", "d", "e", "f", "[PAD]", "[PAD]"]
LABELS = torch.tensor([10, 11, 12, 13, 14, 15, IGNORE, IGNORE])  # 6 real tokens, 2 padding


def _counts_by_hand(labels: list[int], depth: int) -> list[int]:
    """Depth d: the positions t with t + d inside the row and labels[t + d] not -100."""
    n = len(labels)
    return [sum(1 for t in range(n - d) if labels[t + d] != IGNORE) for d in range(1, depth + 1)]


def test_each_depth_row_shows_the_token_d_places_ahead_or_minus_100():
    rows = mtp_label_rows(TOKENS, LABELS, 3)
    assert list(rows) == ["input", "labels", "depth 1", "depth 2", "depth 3"]
    assert rows["labels"] == ["a", "b", "c", "d", "e", "f", IGNORED, IGNORED]
    for d in (1, 2, 3):
        for t, shown in enumerate(rows[f"depth {d}"]):
            ahead = t + d
            real = ahead < len(TOKENS) and int(LABELS[ahead]) != IGNORE
            assert shown == (TOKENS[ahead] if real else IGNORED), (d, t)
    assert rows["depth 3"].count(IGNORED) == 5  # 3 past the row's end, 2 on padding


def test_the_counts_are_those_of_a_plain_loop_and_shrink_with_depth():
    text = mtp_count_text(LABELS, 4)
    counts = [int(line.split(": ")[1].split()[0]) for line in text.splitlines()]
    assert counts == _counts_by_hand(LABELS.tolist(), 4) == [5, 4, 3, 2]
    prompt = LABELS.clone()
    prompt[:2] = IGNORE  # a -100 at the start costs depth d a target only at t = 2 - d >= 0
    lines = mtp_count_text(prompt, 4).splitlines()
    counted = [int(line.split(": ")[1].split()[0]) for line in lines]
    assert counted == _counts_by_hand(prompt.tolist(), 4)


def test_the_table_greys_the_positions_without_a_target():
    markup = mtp_table_html(TOKENS, LABELS, 2)
    assert markup.count("<tr>") == 1 + 4  # header, input, labels, depth 1, depth 2
    assert "depths 1 to 2" in markup and "no target (-100)" in markup


def test_the_widget_follows_its_depth_slider():
    box = mtp_labels_widget(TOKENS, LABELS, max_depth=4)
    assert marker_fields(shown_marker(box)) == {"depth": "1", "counts": "5"}
    box.controls["depth"].value = 3
    assert marker_fields(shown_marker(box)) == {"depth": "3", "counts": "5,4,3"}
    shown = html.unescape(shown_html(box))
    assert "depth 3: 3 targets" in shown and ">depth 3<" in shown and ">depth 4<" not in shown
    assert "depth=3" in box.static_text()
    assert "depth 3: 3 targets" in html.unescape(box.static_html())  # the kernel-free picture
    started = mtp_labels_widget(TOKENS, LABELS, max_depth=4, depth=2)
    assert marker_fields(shown_marker(started)) == {"depth": "2", "counts": "5,4"}


@pytest.mark.parametrize(
    ("call", "error", "name"),
    [
        (lambda: mtp_label_rows(TOKENS[:-1], LABELS, 1), ValueError, "labels"),
        (lambda: mtp_label_rows("abcdefgh", LABELS, 1), TypeError, "tokens"),
        (lambda: mtp_label_rows(TOKENS, LABELS.float(), 1), TypeError, "labels"),
        (lambda: mtp_label_rows(TOKENS, LABELS, 0), ValueError, "depth"),
        (lambda: mtp_labels_widget(TOKENS, LABELS, max_depth=0), ValueError, "max_depth"),
        (lambda: mtp_labels_widget(TOKENS, LABELS, max_depth=2, depth=3), ValueError, "depth"),
    ],
)
def test_bad_input_names_the_argument(call, error, name):
    with pytest.raises(error, match=name):
        call()
