"""The first code cell of every lesson installs the course where it is missing (Colab, Binder, a
fresh Python) and does nothing where ``lmlessons`` is importable."""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import re
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


def _needs_trl(path: Path) -> bool:
    """Whether the lesson runs TRL: it imports it, or calls the course's GRPO trainer."""
    code = "".join("".join(cell["source"]) for cell in code_cells(path)[1:])
    return re.search(r"\btrl\b|grpo_trainer", code) is not None


NEEDS_TRL = {p.name for p in LESSONS if _needs_trl(p)}
PLAIN = next(_first_code(p) for p in LESSONS if p.name not in NEEDS_TRL)
WITH_TRL = next(_first_code(p) for p in LESSONS if p.name in NEEDS_TRL)


class _Shell:
    """Records the line magics the cell runs instead of running them."""

    def __init__(self) -> None:
        self.magics: list[tuple[str, str]] = []

    def run_line_magic(self, name: str, line: str) -> None:
        self.magics.append((name, line))


def _run(source: str, *, missing: tuple[str, ...]) -> tuple[list[tuple[str, str]], str]:
    """The magics the cell runs where the packages ``missing`` are not installed, and what it
    prints (the installed versions it reports are this venv's)."""
    shell = _Shell()
    code = TransformerManager().transform_cell(source)
    find_spec = importlib.util.find_spec
    fake = lambda name, *a: None if name in missing else find_spec(name, *a)  # noqa: E731
    printed = io.StringIO()
    with mock.patch("importlib.util.find_spec", fake), contextlib.redirect_stdout(printed):
        exec(compile(code, "<install cell>", "exec"), {"get_ipython": lambda: shell})
    return shell.magics, printed.getvalue()


@pytest.mark.parametrize("path", [*LESSONS, *COPIES], ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_lesson_starts_with_the_install_cell_its_code_needs(path: Path) -> None:
    assert _first_code(path) == (WITH_TRL if path.name in NEEDS_TRL else PLAIN)


def test_only_the_lessons_that_run_trl_install_it() -> None:
    assert NEEDS_TRL and len(NEEDS_TRL) < len(LESSONS), NEEDS_TRL
    assert '"lmlessons[rl] @' in WITH_TRL and "lmlessons[rl]" not in PLAIN


def test_the_install_cell_is_a_no_op_where_the_course_is_installed() -> None:
    for cell in (PLAIN, WITH_TRL):
        assert _run(cell, missing=()) == ([], "")
    for path in LESSONS:  # executed here, where lmlessons is installed: no output at all
        assert code_cells(path)[0].get("outputs") == [], path.name


@pytest.mark.parametrize(
    ("cell", "missing", "spec"),
    [
        (PLAIN, ("lmlessons",), "lmlessons"),
        (WITH_TRL, ("lmlessons",), "lmlessons[rl]"),
        (WITH_TRL, ("trl",), "lmlessons[rl]"),  # the course without TRL: lessons 11 and 12 add it
    ],
    ids=["plain", "trl-lesson", "trl-missing"],
)
def test_the_install_cell_installs_the_repository_where_it_is_missing(
    cell: str, missing: tuple[str, ...], spec: str
) -> None:
    magics, printed = _run(cell, missing=missing)
    assert len(magics) == 1 and magics[0][0] == "pip"
    line = magics[0][1]
    assert line.startswith("install ") and f'"{spec} @ git+{_repository()}"' in line
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in line  # never a CUDA torch
    # transformers needs huggingface-hub 1.31 or later, not 2; Colab's diffusers 0.39 and gradio
    # 6.24 require huggingface-hub<2 (their wheels' Requires-Dist), and keep working below 2
    assert '"huggingface-hub<2"' in line
    # it says what it installed: the versions the learner now has
    assert printed.startswith("installed: lmlessons ") and "transformers " in printed, printed


def test_a_plain_cell_leaves_a_course_without_trl_alone() -> None:
    assert _run(PLAIN, missing=("trl",)) == ([], "")


def test_the_check_catches_a_cell_that_always_installs() -> None:
    always = PLAIN.replace('if importlib.util.find_spec("lmlessons") is None:\n    ', "")
    always = always.replace("\n    ", "\n")
    assert always != PLAIN and _run(always, missing=())[0] != []
