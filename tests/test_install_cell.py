"""The first code cell of every lesson installs the course where it is missing (Colab, Binder, a
fresh Python) and does nothing where ``lmlessons`` is importable."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from unittest import mock

import pytest
from _lessons import COPIES, LESSONS, ROOT, code_cells
from IPython.core.inputtransformer2 import TransformerManager


def _repository() -> str:
    """The hosting address, defined once in the site's configuration."""
    tree = ast.parse((ROOT / "site" / "conf.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == (
            "lmlessons_repository"
        ):
            return ast.literal_eval(node.value)
    raise AssertionError("site/conf.py defines lmlessons_repository")


def _first_code(path: Path) -> str:
    return "".join(code_cells(path)[0]["source"])


INSTALL = _first_code(LESSONS[0])


class _Shell:
    """Records the line magics the cell runs instead of running them."""

    def __init__(self) -> None:
        self.magics: list[tuple[str, str]] = []

    def run_line_magic(self, name: str, line: str) -> None:
        self.magics.append((name, line))


def _run(source: str, *, installed: bool) -> list[tuple[str, str]]:
    shell = _Shell()
    code = TransformerManager().transform_cell(source)
    find_spec = importlib.util.find_spec
    fake = (
        find_spec
        if installed
        else (lambda name, *a: None if name == "lmlessons" else find_spec(name, *a))
    )
    with mock.patch("importlib.util.find_spec", fake):
        exec(compile(code, "<install cell>", "exec"), {"get_ipython": lambda: shell})
    return shell.magics


@pytest.mark.parametrize("path", [*LESSONS, *COPIES], ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_lesson_starts_with_the_same_install_cell(path: Path) -> None:
    assert _first_code(path) == INSTALL


def test_the_install_cell_is_a_no_op_where_the_course_is_installed() -> None:
    assert _run(INSTALL, installed=True) == []
    for path in LESSONS:  # executed here, where lmlessons is installed: no output at all
        assert code_cells(path)[0].get("outputs") == [], path.name


def test_the_install_cell_installs_the_repository_where_the_course_is_missing() -> None:
    magics = _run(INSTALL, installed=False)
    assert len(magics) == 1 and magics[0][0] == "pip"
    line = magics[0][1]
    assert line.startswith("install ") and f'"lmlessons @ git+{_repository()}"' in line
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in line  # never a CUDA torch


def test_the_check_catches_a_cell_that_always_installs() -> None:
    always = INSTALL.replace('if importlib.util.find_spec("lmlessons") is None:\n    ', "")
    assert always != INSTALL and _run(always, installed=True) != []
