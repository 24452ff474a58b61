"""A lesson's widget in ipywidgets 7's front end: classic Notebook 6.5 with widgetsnbextension 3.6
(the page Google Colab's ipywidgets 7.7 runtime is made for), in Chromium.

``tests/test_widgets_ipywidgets7.py`` checks what the kernel publishes under ipywidgets 7.7.1;
this test checks that a page with 7's front end renders it and that it responds. One classic
Notebook server (``tools.browser.ClassicNotebook``, over a temporary copy of one lesson's widget
slice, ``tools/widget_slice.py``) and one Chromium page: run the lesson, assert no error output
and no console error, that the widget is rendered live (not the static picture), move it and
wait for the state the lesson table (``tools/browser_lessons.py``) expects, as
``tests/test_browser.py`` does in JupyterLab 4. The harness check: the lesson as committed, with
its saved ipywidgets 8 widget state, fails it.

Classic Notebook, widgetsnbextension, ipywidgets 7.7.1 and their kernel are not in the course's
lock: ``make setup`` installs them apart into ``<venv>/classic`` (``requirements-classic.txt``),
which the server and its kernels put first on ``PYTHONPATH``. Skips when that folder or Chromium
is missing.
"""

from __future__ import annotations

import os
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

import tools.browser as jb
from tools.browser_lessons import LESSONS
from tools.widget_slice import widget_slice

pytestmark = [pytest.mark.browser, pytest.mark.slow]

#: The classic folder (`make setup`); LMLESSONS_CLASSIC names another one to try.
CLASSIC = Path(os.environ.get("LMLESSONS_CLASSIC") or Path(sys.prefix) / "classic")
#: What ipywidgets 7's front end says of an ipywidgets 8 model.
MISSING_8 = r"Cannot find model module @jupyter-widgets/controls@2\.0\.0"
RUN_TIMEOUT = float(os.environ.get("LMLESSONS_BROWSER_RUN_TIMEOUT", "120"))
#: The widget-heavy lesson checked: the bug zoo (three case browsers of two dropdowns and an
#: Output each, in one page).
LESSON = next(lesson for lesson in LESSONS if lesson.number == "08")


def _installed(package: str) -> str | None:
    """The version of ``package`` in the classic folder, or None."""
    found = sorted(CLASSIC.glob(f"{package}-*.dist-info"))
    return found[0].name.removeprefix(f"{package}-").removesuffix(".dist-info") if found else None


@pytest.fixture(scope="module")
def site() -> Path:
    wanted = {"notebook": "6.5.", "widgetsnbextension": "3.6.", "ipywidgets": "7.7."}
    found = {name: _installed(name) for name in wanted}
    if None in found.values():
        pytest.skip(
            f"no classic Notebook environment in {CLASSIC} (found {found}): `make setup` "
            "installs it there from requirements-classic.txt"
        )
    for name, prefix in wanted.items():
        assert str(found[name]).startswith(prefix), f"{CLASSIC}: {name} {found[name]}"
    return CLASSIC


@pytest.fixture(scope="module")
def lesson_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The lesson's widget slice twice: ``live.ipynb`` without the widget state the lesson is
    committed with (``metadata.widgets``, saved by ipywidgets 8 when it was executed) and
    ``saved_state.ipynb`` with it. ipywidgets 7's front end tries to restore that state when the
    page opens and cannot: it holds ipywidgets 8's models (``@jupyter-widgets/controls`` 2.0.0,
    such as ``HTMLStyleModel``), so the console shows "Cannot find model module" before a cell
    runs. A run's live widgets do not depend on it."""
    path = LESSON.resolve()
    if path is None:
        pytest.skip(f"notebooks/{LESSON.notebook} is not written yet")
    folder = tmp_path_factory.mktemp("classic-lesson")
    nb = widget_slice(nbformat.read(path, as_version=4))
    nbformat.write(nb, folder / "saved_state.ipynb")
    assert "widgets" in nb.metadata, "the lesson has no saved widget state: pick another harness"
    del nb.metadata["widgets"]
    nbformat.write(nb, folder / "live.ipynb")
    return folder


@pytest.fixture(scope="module")
def server(
    site: Path, context: jb.BrowserContext, lesson_dir: Path
) -> Iterator[jb.ClassicNotebook]:
    """One classic Notebook server over a copy of ``lesson_dir``; the repo's notebooks/ and the
    folder itself must be untouched afterwards."""
    before = jb.tree_hashes(jb.NOTEBOOKS_DIR), jb.tree_hashes(lesson_dir)
    with jb.ClassicNotebook(lesson_dir, site=site) as notebook_server:
        yield notebook_server
        leftover = notebook_server.running_kernels()
        proc = notebook_server.proc
    assert proc is not None and proc.returncode is not None, "server still running"
    assert not leftover, f"kernels left running: {leftover}"
    after = jb.tree_hashes(jb.NOTEBOOKS_DIR), jb.tree_hashes(lesson_dir)
    assert after == before, "notebooks/ or the lesson's copy changed during the test"


def test_the_page_serves_the_pinned_widgetsnbextension(
    site: Path, server: jb.ClassicNotebook
) -> None:
    """The nbextension the page loads is the classic folder's, not the venv's widgetsnbextension
    4 (whose nbextension sits in the venv's share/jupyter too)."""
    url = f"{server.base_url}/nbextensions/jupyter-js-widgets/extension.js?token={server.token}"
    with urllib.request.urlopen(url, timeout=30) as response:
        served = response.read()
    pinned = site / "widgetsnbextension" / "static" / "extension.js"
    assert served == pinned.read_bytes()


def test_harness_fails_on_ipywidgets_8_widget_state(
    context: jb.BrowserContext, server: jb.ClassicNotebook
) -> None:
    """The check can fail: the lesson as committed, whose saved ipywidgets 8 widget state the
    page cannot restore, fails it on the console errors."""
    assert LESSON.widget is not None and LESSON.expected is not None
    with pytest.raises(AssertionError, match=r"console errors after run-all:\n.*" + MISSING_8):
        jb.check_lesson_classic(
            context, server, "saved_state.ipynb", LESSON.widget, LESSON.expected,
            run_timeout=RUN_TIMEOUT,
        )  # fmt: skip
    assert server.running_kernels() == []


def test_lesson_widget_in_classic_notebook(
    context: jb.BrowserContext, server: jb.ClassicNotebook, capsys: pytest.CaptureFixture[str]
) -> None:
    """The lesson's widget renders live in ipywidgets 7's front end, and moving it gives the
    state the lesson table expects."""
    assert LESSON.widget is not None and LESSON.expected is not None
    result = jb.check_lesson_classic(
        context, server, "live.ipynb", LESSON.widget, LESSON.expected, run_timeout=RUN_TIMEOUT
    )
    assert result.markers_after.count(LESSON.expected) == 1, result.markers_after
    with capsys.disabled():
        print(
            f"\n  classic notebook {LESSON.notebook}: open {result.open_s:.1f} s, run "
            f"{result.cells} cells {result.run_s:.1f} s, widget {result.move_s:.1f} s"
        )
