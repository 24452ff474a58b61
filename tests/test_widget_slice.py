"""The widget slices the browser test runs (tools/widget_slice.py)."""

from __future__ import annotations

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from tests._lessons import LESSONS
from tools.widget_slice import STATE_KEY, VIEW, widget_slice

MODEL_BOX, MODEL_OUT = "a" * 32, "b" * 32


def _notebook(*sources: str, widget_at: int) -> nbformat.NotebookNode:
    """Code cells from ``sources``; the one at ``widget_at`` shows a box holding a state element."""
    nb = new_notebook(cells=[new_markdown_cell("# demo"), *map(new_code_cell, sources)])
    view = {"output_type": "display_data", "metadata": {}, "data": {VIEW: {"model_id": MODEL_BOX}}}
    nb.cells[1 + widget_at].outputs = [nbformat.from_dict(view)]
    state = {
        MODEL_BOX: {"state": {"children": [f"IPY_MODEL_{MODEL_OUT}"]}},
        MODEL_OUT: {
            "state": {"outputs": [{"data": {"text/html": '<div class="lmlessons-state">'}}]}
        },
    }
    nb.metadata["widgets"] = {STATE_KEY: {"state": state}}
    return nb


def _sources(nb: nbformat.NotebookNode) -> list[str]:
    return [c.source for c in nb.cells]


def test_the_slice_keeps_what_the_widget_needs_and_drops_the_rest() -> None:
    nb = _notebook(
        "%matplotlib inline\nimport torch\nfrom demo import widget",
        "a = [1]\nunused = torch.zeros(3)",
        "b = [x for x in range(3)]",  # x is the comprehension's own
        "a.append(2)",  # changes a
        "print(len(a))",  # reads a only
        "x = 5",
        "widget(a)",
        "after = 1",
        widget_at=6,
    )
    assert _sources(widget_slice(nb)) == [
        "%matplotlib inline\nimport torch\nfrom demo import widget",
        "a = [1]\nunused = torch.zeros(3)",
        "a.append(2)",
        "widget(a)",
    ]


def test_a_notebook_without_a_state_widget_is_refused() -> None:
    nb = _notebook("import demo", "demo.widget()", widget_at=1)
    nb.metadata["widgets"][STATE_KEY]["state"][MODEL_OUT]["state"]["outputs"] = []
    with pytest.raises(ValueError, match="no widget cell"):
        widget_slice(nb)


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_lesson_has_a_smaller_slice_with_its_setup(path) -> None:
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    cut = widget_slice(nb)
    assert 2 <= len(cut.cells) < len(code)
    assert all(c.outputs == [] and c.execution_count is None for c in cut.cells)
    assert [c.id for c in cut.cells] == [c.id for c in code if c.id in {x.id for x in cut.cells}]
