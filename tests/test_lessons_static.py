"""What a reader without a kernel sees in the stored lessons (and their student copies)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from _lessons import COPIES, LESSONS, cells, code_cells

from tools import reading_time

LINK = re.compile(r"\]\(([^)\s#]+)(#[^)\s]*)?\)")
OUTSIDE = re.compile(
    r"\.\./shared|seed (code|file)|tutorial (code|file) this course|\bissue \d+\b", re.I
)


def _markdown(path: Path) -> str:
    return "\n".join("".join(c["source"]) for c in cells(path) if c["cell_type"] == "markdown")


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_no_stderr_in_stored_outputs(path: Path) -> None:
    for index, cell in enumerate(code_cells(path)):
        names = [o.get("name") for o in cell.get("outputs", []) if o["output_type"] == "stream"]
        assert "stderr" not in names, f"{path.name} code cell {index} stores stderr"


@pytest.mark.parametrize("path", LESSONS + COPIES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_relative_link_resolves(path: Path) -> None:
    for target, _ in LINK.findall(_markdown(path)):
        if not re.match(r"[a-z]+:", target):
            assert (path.parent / target).resolve().exists(), f"{path.name} links to {target}"


@pytest.mark.parametrize("index", range(len(LESSONS)), ids=lambda i: LESSONS[i].stem)
def test_each_lesson_ends_with_links_to_its_neighbours_and_the_index(index: int) -> None:
    last = "".join(cells(LESSONS[index])[-1]["source"])
    wanted = ["../README.md#the-lessons"]
    wanted += [f"({LESSONS[index - 1].name})"] if index > 0 else []
    wanted += [f"({LESSONS[index + 1].name})"] if index < len(LESSONS) - 1 else []
    for link in wanted:
        assert link in last, f"{LESSONS[index].name}'s last cell lacks {link}"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_no_reference_the_reader_cannot_follow(path: Path) -> None:
    found = OUTSIDE.findall(_markdown(path))
    assert not found, f"{path.name} refers outside the course: {found}"


def test_stated_times_are_measured() -> None:
    assert reading_time.stale(write=False) == [], "run `python -m tools.reading_time --write`"


def test_the_time_estimate_follows_its_formula() -> None:
    estimate = reading_time.Estimate(
        words=1800,
        code_lines=140,
        output_lines=60,
        pictures=4,
        widgets=1,
        predictions=1,
        quiz_questions=4,
        what_ifs=2,
        exercises=("make_nsp_pairs",),
        run_seconds=60,
    )
    # quick: 10 + 10 + 1 + 1 + 2 + 1 + 2 + 3 + 30 + 1 = 61; careful: 13.8 + 14 + 2 + 2 + 4 + 2
    # + 4 + 6 + 60 + 1 = 108.8; each to the nearest 5 minutes
    assert estimate.minutes == (60, 110)
    assert "60-110 minutes" in estimate.statement() and "1,800 words" in estimate.statement()
    other = reading_time.Estimate(**{**vars(estimate), "exercises": ("mlm_loss",)})
    assert other.minutes == (35, 60)  # an exercise's own time, not one time for all


def _outputs(path: Path) -> list[tuple[int, dict]]:
    code = enumerate(code_cells(path))
    return [(index, out) for index, cell in code for out in cell.get("outputs", [])]


def _text(output: dict) -> str:
    data = output.get("data", {})
    return (
        "".join(output.get("text", ""))
        + "".join(data.get("text/plain", ""))
        + "".join(data.get("text/html", ""))
    )


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_stored_widget_view_has_a_picture_beside_it(path: Path) -> None:
    for index, output in _outputs(path):
        data = output.get("data", {})
        if "application/vnd.jupyter.widget-view+json" in data:
            assert {"text/html", "image/png"} & set(data), (
                f"{path.name} code cell {index}: widget without a picture"
            )


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_no_frozen_progress_bar_and_no_test_plumbing(path: Path) -> None:
    for index, output in _outputs(path):
        text = _text(output)
        assert "0%|" not in text, f"{path.name} code cell {index} stores a progress bar at 0%"
        assert "[widget]" not in text, f"{path.name} code cell {index} shows a test marker"
    assert "[widget]" not in json.dumps(cells(path)), f"{path.name} mentions [widget] markers"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_figure_has_an_alt_text_that_says_what_it_shows(path: Path) -> None:
    """A cell with a plotted figure names what it shows in ``mystnb.image.alt`` (the website's
    alt text): several words, not a file name."""
    missing = []
    for index, cell in enumerate(code_cells(path)):
        plots = [o for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
        if not [o for o in plots if "text/html" not in o["data"]]:
            continue
        alt = cell.get("metadata", {}).get("mystnb", {}).get("image", {}).get("alt", "")
        if len(alt.split()) < 6 or re.search(r"\.(png|svg)\b", alt):
            missing.append(f"cell {index}: {alt!r}")
    assert not missing, f"{path.name}: figures without a real alt text: {missing}"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_widget_picture_has_an_alt_text(path: Path) -> None:
    """The PNGs inside widget pictures carry an alt text of several words."""
    bad = []
    for index, cell in enumerate(code_cells(path)):
        for out in cell.get("outputs", []):
            markup = "".join(out.get("data", {}).get("text/html", ""))
            for alt in re.findall(r"<img\b[^>]*?\balt=\"([^\"]*)\"", markup):
                if len(alt.split()) < 3:
                    bad.append(f"cell {index}: {alt!r}")
            if markup.count("<img") != len(re.findall(r"<img\b[^>]*?\balt=\"", markup)):
                bad.append(f"cell {index}: an <img> without alt")
    assert not bad, f"{path.name}: {bad}"
