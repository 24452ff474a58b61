"""The root conftest.py orders test files longest first for xdist (``make test``)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
assert spec is not None and spec.loader is not None
root_conftest = importlib.util.module_from_spec(spec)
spec.loader.exec_module(root_conftest)


class _Item:
    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid


def test_longest_files_go_first_and_each_file_keeps_its_order():
    ids = [
        "tests/test_a.py::x",
        "notebooks/01_mlm_masking.ipynb::Cell 0",
        "tests/test_browser.py::test_one",
        "notebooks/10_answer_only.ipynb::Cell 0",
        "tests/test_a.py::y",
        "notebooks/10_answer_only.ipynb::Cell 1",
        "tests/test_browser.py::test_two",
    ]
    items = [_Item(i) for i in ids]
    root_conftest.pytest_collection_modifyitems(None, items)
    order = [i.nodeid for i in items]
    assert order == [
        "tests/test_browser.py::test_one",
        "tests/test_browser.py::test_two",
        "notebooks/10_answer_only.ipynb::Cell 0",
        "notebooks/10_answer_only.ipynb::Cell 1",
        "notebooks/01_mlm_masking.ipynb::Cell 0",
        "tests/test_a.py::x",
        "tests/test_a.py::y",
    ]


def test_every_lesson_has_a_cost_and_make_keeps_xdist_from_reordering():
    costs = root_conftest._lesson_seconds()
    lessons = {f"notebooks/{p.name}" for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert lessons <= set(costs)
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^XDIST := .*--dist loadscope --no-loadscope-reorder", makefile, re.M)
