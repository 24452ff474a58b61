"""The course's palette (lmlessons/course/palette.py): readable, and never colour alone."""

from __future__ import annotations

import re

import pytest
from pygments.styles import get_style_by_name

from lmlessons.course.palette import (
    BAD,
    CODE_BOX,
    CODE_STYLE,
    COLORS,
    CUES,
    GOOD,
    INK,
    MUTED,
    ink_on,
    on_color,
)
from lmlessons.widgets.display import token_table_html

#: The light backgrounds of the course's boxes (check results, hints, solutions, reveals).
BOXES = ["#ffffff", "#eef8ee", "#fdf0f0", "#f6f6f6", "#eef4fa", "#f7f2fa", "#f4f8fc"]
CATEGORIES = ["special", "mask", "random", "kept", "target", "segment_b"]


def contrast(a: str, b: str) -> float:
    """WCAG 2.1 contrast ratio of two #rrggbb colours."""

    def luminance(color: str) -> float:
        channels = [int(color[i : i + 2], 16) / 255 for i in (1, 3, 5)]
        linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_the_contrast_formula() -> None:
    assert contrast("#000000", "#ffffff") == pytest.approx(21)
    assert contrast("#777777", "#ffffff") == pytest.approx(4.48, abs=0.01)  # just under AA


@pytest.mark.parametrize("name", list(COLORS))
def test_ink_is_readable_on_every_colour(name: str) -> None:
    assert contrast(INK, COLORS[name]) >= 7
    assert f"color:{INK}" in ink_on(COLORS[name])


@pytest.mark.parametrize("name", CATEGORIES)
def test_each_category_has_a_cue_beside_its_colour(name: str) -> None:
    color = COLORS[name]
    assert CUES[color] and CUES[color] in on_color(color)
    table = token_table_html({"input": ["x"]}, colors={"input": [color]}, legend={name: color})
    assert table.count(CUES[color]) == 2  # the cell and its legend chip


def test_the_cues_tell_the_categories_apart() -> None:
    cues = [CUES[COLORS[name]] for name in ("special", "mask", "random", "kept")]
    assert len(set(cues)) == len(cues)


def test_muted_text_falls_back_to_a_grey_that_passes_aa() -> None:
    (fallback,) = re.findall(r"#[0-9a-f]{6}", MUTED)
    assert all(contrast(fallback, box) >= 4.5 for box in BOXES)
    assert "--jp-content-font-color2" in MUTED  # the theme's own colour comes first


def test_code_in_pictures_passes_aa_on_every_box() -> None:
    colors = {s["color"] for _, s in get_style_by_name(CODE_STYLE) if s["color"]}
    worst = min(contrast(f"#{c}", box) for c in colors for box in BOXES)
    assert worst >= 4.5, worst


def test_right_and_wrong_text_passes_aa_on_white_and_every_box() -> None:
    assert min(contrast(c, box) for c in (GOOD, BAD) for box in BOXES) >= 4.5
    assert contrast(INK, CODE_BOX) >= 7
