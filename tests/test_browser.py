"""The course in a real browser: JupyterLab 4 in Chromium, every lesson run and its widget moved.

One JupyterLab server (over a temporary copy of notebooks/), one Chromium and one JupyterLab page
serve all lessons; each lesson is opened as a document in that page, closed afterwards and its
kernel shut down. Per lesson: open it, run all cells, wait for the kernel to go idle, assert no
error output and no browser console errors, move the main widget and wait for the exact hidden
state ``key=value ...`` the new value implies.

The per-lesson table lives in ONE place, ``tools/browser_lessons.py`` (``make screenshots``
reads it too). Skips only when no Chromium can be found (``apt-get install chromium``).

Run: ``make test-browser`` (or ``.venv/bin/python -m pytest tests -m browser``).
Timeout per lesson run: ``LMLESSONS_BROWSER_RUN_TIMEOUT`` seconds (default 120).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

import tools.browser as jb
from tools.browser_lessons import LESSONS, Lesson

pytestmark = pytest.mark.browser

RUN_TIMEOUT = float(os.environ.get("LMLESSONS_BROWSER_RUN_TIMEOUT", "120"))
WIDGET_MANAGER_PLUGIN = "@jupyter-widgets/jupyterlab-manager:plugin"
NOTEBOOK_PLUGIN = "@jupyterlab/notebook-extension:tracker"


# ------------------------------------------------------------------------------------------
# Fixtures: one server for the lessons (module scope; Chromium from tests/conftest.py)
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def repo_before() -> dict[str, Any]:
    """The repo's state before any server runs (compared by test_repo_unchanged)."""
    return {"git status": jb.git_status(), "notebooks": jb.tree_hashes(jb.NOTEBOOKS_DIR)}


@pytest.fixture(scope="module")
def lab(chromium: str, repo_before: dict[str, Any]) -> Iterator[jb.JupyterLab]:
    with jb.JupyterLab(jb.NOTEBOOKS_DIR, slices=True) as server:
        yield server
        leftover = server.running_kernels()
    assert server.proc is not None and server.proc.returncode is not None, "server still running"
    assert not leftover, f"kernels left running after the lessons: {leftover}"


@pytest.fixture(scope="module")
def lessons_page(context: jb.BrowserContext, lab: jb.JupyterLab) -> Iterator[jb.LabPage]:
    """The one JupyterLab page the lessons open in, one after another."""
    shared = jb.lab_page(context, lab)
    yield shared
    shared.page.close()


# ------------------------------------------------------------------------------------------
# The harness can fail: a demo notebook whose slider is (or is not) wired to its marker
# ------------------------------------------------------------------------------------------
def _demo_notebook(
    path: Path,
    *,
    wired: bool,
    error: bool = False,
    console_error: bool = False,
    faint: bool = False,
) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    callback = [
        "slider = widgets.IntSlider(value=2, min=0, max=10, description='demo value')",
        "out = widgets.Output()",
        "def show(value):",
        "    with out:",
        "        out.clear_output(wait=True)",
        "        state = f'value={value} squared={value * value}'",
        '        tag = f\'<div class="lmlessons-state" data-state="{state}" hidden></div>\'',
        "        display(HTML(tag))",
    ]
    if faint:  # fixed dark text with no background: unreadable in JupyterLab Dark
        callback.append("        display(HTML('<span style=\"color:#333\">dark grey note</span>'))")
    if wired:
        callback.append("slider.observe(lambda change: show(change['new']), names='value')")
    callback += ["show(slider.value)", "display(widgets.VBox([slider, out]))"]
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Demo"),
        nbformat.v4.new_code_cell(
            "import ipywidgets as widgets\nfrom IPython.display import HTML, display"
        ),
        nbformat.v4.new_code_cell("\n".join(callback)),
        nbformat.v4.new_code_cell("1 / 0" if error else "print('after the widget')"),
    ]
    if console_error:  # JupyterLab runs trusted application/javascript outputs
        nb.cells.append(
            nbformat.v4.new_code_cell(
                "from IPython.display import Javascript\n"
                "display(Javascript(\"console.error('demo console error')\"))"
            )
        )
    nbformat.write(nb, path)


def test_harness_detects_broken_lessons(
    context: jb.BrowserContext, lab: jb.JupyterLab, lessons_page: jb.LabPage
) -> None:
    """In the page and server the lessons then run in: the checks pass on a working demo and fail
    on an unwired slider (the marker does not change), on an exception, on a browser console
    error and on text too faint in the dark theme; a failure is not carried over to the next
    notebook."""
    assert lab.root_dir is not None
    demos = lab.root_dir / "harness-demo"  # in the server's temporary copy, beside the lessons
    demos.mkdir()
    _demo_notebook(demos / "00_wired.ipynb", wired=True)
    _demo_notebook(demos / "01_unwired.ipynb", wired=False)
    _demo_notebook(demos / "02_error.ipynb", wired=True, error=True)
    _demo_notebook(demos / "03_console.ipynb", wired=True, console_error=True)
    _demo_notebook(demos / "04_faint.ipynb", wired=True, faint=True)
    spec, expected = jb.Slider("demo value", presses=3), "value=5 squared=25"

    def check(name: str, **kwargs: Any) -> jb.LessonResult:
        return jb.check_lesson(
            context,
            lab,
            f"harness-demo/{name}",
            spec,
            expected,
            run_timeout=RUN_TIMEOUT,
            shared=lessons_page,
            **kwargs,
        )

    dark = demos / "dark.png"
    result = check("00_wired.ipynb", dark_screenshot=dark)
    assert dark.stat().st_size > 0
    assert result.markers_before == ["value=2 squared=4"]
    assert result.markers_after == [expected]
    with pytest.raises(AssertionError, match="did not appear"):
        check("01_unwired.ipynb", marker_timeout=3)
    with pytest.raises(AssertionError, match="ZeroDivisionError"):
        check("02_error.ipynb")
    with pytest.raises(AssertionError, match=r"console errors:\n.*demo console error"):
        check("03_console.ipynb")
    with pytest.raises(AssertionError, match=r"too faint in JupyterLab Dark:\n.*dark grey note"):
        check("04_faint.ipynb")
    # After four failures in the same page, the working demo passes again on its own.
    assert check("00_wired.ipynb").markers_after == [expected]
    assert lab.running_kernels() == []


# ------------------------------------------------------------------------------------------
# The course
# ------------------------------------------------------------------------------------------
def test_lab_config(context: jb.BrowserContext, lab: jb.JupyterLab) -> None:
    """News prompt disabled by configuration, widgets' labextension loaded, no console errors."""
    state = jb.lab_plugin_state(
        context, lab, [jb.ANNOUNCEMENTS_PLUGIN, WIDGET_MANAGER_PLUGIN, NOTEBOOK_PLUGIN]
    )
    assert state["plugins"] == {
        jb.ANNOUNCEMENTS_PLUGIN: False,
        WIDGET_MANAGER_PLUGIN: True,
        NOTEBOOK_PLUGIN: True,
    }, state
    assert not [t for t in state["toasts"] if "news" in t.lower()], state["toasts"]
    assert not state["console_errors"], state["console_errors"]


def test_every_lesson_has_a_row() -> None:
    """Each NN_*.ipynb in notebooks/ is matched by exactly one row of the table."""
    rows: dict[str, str] = {}
    for lesson in LESSONS:
        path = lesson.resolve()
        if path is not None:
            assert path.name not in rows, (
                f"{path.name} matched by {rows[path.name]} and {lesson.notebook}"
            )
            rows[path.name] = lesson.notebook
    missing = [p.name for p in jb.lesson_files() if p.name not in rows]
    assert not missing, f"lessons without a row in tools/browser_lessons.py: {missing}"


@pytest.mark.parametrize("lesson", LESSONS, ids=[lesson.number for lesson in LESSONS])
def test_lesson_in_browser(
    lesson: Lesson,
    context: jb.BrowserContext,
    lab: jb.JupyterLab,
    lessons_page: jb.LabPage,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    path = lesson.resolve()
    if path is None:
        pytest.skip(f"notebooks/{lesson.notebook} is not written yet")
    assert not lesson.is_todo, (
        f"{path.name} exists but its row in tools/browser_lessons.py is still TODO: "
        "give its main widget and the state expected after the move"
    )
    assert lesson.widget is not None and lesson.expected is not None
    dark = tmp_path / f"{path.stem}-dark.png"  # the widget in JupyterLab Dark, for a human look
    result = jb.check_lesson(
        context,
        lab,
        path.name,
        lesson.widget,
        lesson.expected,
        run_timeout=RUN_TIMEOUT,
        dark_screenshot=dark,
        shared=lessons_page,
    )
    assert dark.stat().st_size > 0
    assert jb.markers(lessons_page.page) == [], "the lesson's outputs stayed on the page"
    with capsys.disabled():
        print(
            f"\n  browser {path.name}: open {result.open_s:.1f} s, run {result.cells} cells "
            f"{result.run_s:.1f} s, widget {result.move_s:.1f} s, total {result.total_s:.1f} s"
        )


def test_repo_unchanged(lab: jb.JupyterLab, repo_before: dict[str, Any]) -> None:
    """Running the lessons in the browser wrote nothing into the repo (runs after the lessons)."""
    assert lab.root_dir is not None and lab.root_dir != jb.NOTEBOOKS_DIR
    status_before, status_after = repo_before["git status"], jb.git_status()
    if status_before is not None and status_after is not None:
        new = sorted(set(status_after.splitlines()) - set(status_before.splitlines()))
        gone = sorted(set(status_before.splitlines()) - set(status_after.splitlines()))
        assert status_after == status_before, f"git status changed: new {new}, gone {gone}"
    hashes_before, hashes_after = repo_before["notebooks"], jb.tree_hashes(jb.NOTEBOOKS_DIR)
    changed = sorted(
        k
        for k in hashes_before.keys() | hashes_after.keys()
        if hashes_before.get(k) != hashes_after.get(k)
    )
    assert not changed, f"files in notebooks/ changed while the browser test ran: {changed}"
