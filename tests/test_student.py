"""The student-copy generator (python -m tools.student) and the committed student copies."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

import tools.student as student
from tools.markers import has_solution_region, is_solution_cell
from tools.student import STUB, SolutionMarkerError, main, strip_solutions

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
STUDENT = REPO / "student"

EXERCISE_CELL = '''from lmlessons.exercises import check

def my_mlm_loss(logits, labels, *, num_items_in_batch=None):
    """Mean cross-entropy over positions whose label is not -100."""
    # BEGIN SOLUTION
    import torch.nn.functional as F
    flat = logits.reshape(-1, logits.shape[-1])
    total = F.cross_entropy(flat, labels.reshape(-1), reduction="sum")
    if num_items_in_batch is not None:
        return total / num_items_in_batch
    return total / (labels != -100).sum().clamp(min=1)
    # END SOLUTION
'''


def lesson() -> nbformat.NotebookNode:
    nb = new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.metadata["widgets"] = {"state": {}}
    nb.cells = [
        new_markdown_cell("# A tiny lesson\nWrite `my_mlm_loss`."),
        new_code_cell(EXERCISE_CELL, execution_count=1),
        new_code_cell(
            'result = check("mlm_loss", my_mlm_loss)\nprint(result.status)\nresult',
            execution_count=2,
            outputs=[new_output("stream", name="stdout", text="passed\n")],
        ),
        new_code_cell(
            'from lmlessons.exercises import solution\nsolution("mlm_loss")',
            execution_count=3,
            metadata={"tags": ["solution"]},
        ),
        new_code_cell(
            "print(1 + 1)",
            execution_count=4,
            outputs=[new_output("stream", name="stdout", text="2\n")],
            metadata={"execution": {"iopub.status.busy": "2026-01-01T00:00:00Z"}},
        ),
    ]
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i}"
    return nb


@pytest.fixture
def lesson_dirs(tmp_path):
    src, dest = tmp_path / "notebooks", tmp_path / "student"
    src.mkdir()
    nbformat.write(lesson(), src / "01_tiny.ipynb")
    return src, dest


def run(src: Path, dest: Path, *flags: str) -> int:
    return main(["--src", str(src), "--dest", str(dest), *flags])


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------- the transformation


def test_strip_solutions_keeps_the_indentation():
    out = strip_solutions(EXERCISE_CELL)
    assert f"    {STUB}" in out.split("\n")
    assert "cross_entropy" not in out and "SOLUTION" not in out
    assert (
        '"""Mean cross-entropy over positions whose label is not -100."""' in out
    )  # docstring kept
    nested = (
        "class A:\n    def f(self):\n        # BEGIN SOLUTION\n        return 1\n"
        "        # END SOLUTION\n"
    )
    assert strip_solutions(nested).split("\n")[2] == f"        {STUB}"
    two = (
        "def f():\n  # BEGIN SOLUTION\n  x\n  # END SOLUTION\n\n"
        "def g():\n\t# BEGIN SOLUTION\n\ty\n\t# END SOLUTION"
    )
    assert strip_solutions(two) == f"def f():\n  {STUB}\n\ndef g():\n\t{STUB}"
    assert strip_solutions("x = 1  # no markers") == "x = 1  # no markers"


@pytest.mark.parametrize(
    "source,problem",
    [
        ("def f():\n    # BEGIN SOLUTION\n    return 1\n", "never closed"),
        ("def f():\n    return 1\n    # END SOLUTION\n", "without"),
        ("# BEGIN SOLUTION\nx = 1\n# END SOLUTION\n", "top level"),
        ("def f():\n    # BEGIN SOLUTION\n    # BEGIN SOLUTION\n    # END SOLUTION\n", "inside"),
        ("def f():\n    # BEGIN SOLUTION\nx = 1\n    # END SOLUTION\n", "indented less"),
    ],
)
def test_broken_markers_are_errors(source, problem):
    with pytest.raises(SolutionMarkerError, match=problem):
        strip_solutions(source, "01_x.ipynb, cell 3")


def test_generated_copy(lesson_dirs):
    src, dest = lesson_dirs
    before = digest(src / "01_tiny.ipynb")
    assert run(src, dest) == 0
    assert digest(src / "01_tiny.ipynb") == before  # the source is never touched
    nb = nbformat.read(dest / "01_tiny.ipynb", as_version=4)
    sources = [c.source for c in nb.cells]
    assert len(nb.cells) == 4  # the cell tagged "solution" is gone
    assert not any('solution("mlm_loss")' in s for s in sources)
    assert f"    {STUB}" in sources[1] and "cross_entropy" not in sources[1]
    assert sources[0] == "# A tiny lesson\nWrite `my_mlm_loss`."
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code)
    assert all("execution" not in c.metadata for c in nb.cells)
    assert [c.id for c in nb.cells] == ["cell-0", "cell-1", "cell-2", "cell-4"]
    assert "widgets" not in nb.metadata
    meta = nb.metadata["lmlessons"]
    assert meta["student_copy"] is True and meta["source"] == "notebooks/01_tiny.ipynb"
    assert meta["sources_sha256"] == student.sources_sha256(nb)
    text = (dest / "01_tiny.ipynb").read_text()
    assert "/tmp" not in text and str(src) not in text


def test_second_run_changes_nothing(lesson_dirs, capsys):
    src, dest = lesson_dirs
    assert run(src, dest) == 0
    first = digest(dest / "01_tiny.ipynb")
    assert run(src, dest) == 0
    assert digest(dest / "01_tiny.ipynb") == first
    assert "unchanged" in capsys.readouterr().out


def test_check_mode_detects_stale_and_missing_copies(lesson_dirs, capsys):
    src, dest = lesson_dirs
    assert run(src, dest, "--check") == 1  # missing
    assert not dest.exists()  # --check writes nothing
    assert "missing" in capsys.readouterr().err
    assert run(src, dest) == 0
    assert run(src, dest, "--check") == 0
    nb = nbformat.read(src / "01_tiny.ipynb", as_version=4)
    nb.cells.append(new_markdown_cell("A new section."))
    nbformat.write(nb, src / "01_tiny.ipynb")
    copy_before = digest(dest / "01_tiny.ipynb")
    assert run(src, dest, "--check") == 1
    assert digest(dest / "01_tiny.ipynb") == copy_before
    err = capsys.readouterr().err
    assert "01_tiny.ipynb" in err and "out of date" in err
    (src / "01_tiny.ipynb").rename(src / "02_renamed.ipynb")
    assert run(src, dest) == 0
    assert run(src, dest, "--check") == 1  # the copy of a deleted lesson is stale too
    assert "no longer exists" in capsys.readouterr().err


def test_learner_edits_are_never_overwritten_without_force(lesson_dirs, capsys):
    src, dest = lesson_dirs
    assert run(src, dest) == 0
    target = dest / "01_tiny.ipynb"
    work = nbformat.read(target, as_version=4)
    work.cells[1].source = work.cells[1].source.replace(STUB, "return 42  # my attempt")
    nbformat.write(work, target)
    learner_file = target.read_bytes()
    nb = nbformat.read(src / "01_tiny.ipynb", as_version=4)
    nb.cells[0].source += "\nUpdated by the teacher."
    nbformat.write(nb, src / "01_tiny.ipynb")

    assert run(src, dest) == 1
    assert target.read_bytes() == learner_file  # the learner's work is intact
    err = capsys.readouterr().err
    assert "REFUSED" in err and "01_tiny.ipynb" in err and "--force" in err and "edited" in err

    assert run(src, dest, "--force") == 0
    assert (
        "Updated by the teacher." in target.read_text() and "my attempt" not in target.read_text()
    )


def test_an_executed_but_unedited_copy_is_regenerated(lesson_dirs):
    src, dest = lesson_dirs
    assert run(src, dest) == 0
    target = dest / "01_tiny.ipynb"
    ran = nbformat.read(target, as_version=4)
    ran.cells[3].outputs = [new_output("stream", name="stdout", text="2\n")]
    ran.cells[3].execution_count = 1
    nbformat.write(ran, target)
    nb = nbformat.read(src / "01_tiny.ipynb", as_version=4)
    nb.cells[0].source += "\nA fix."
    nbformat.write(nb, src / "01_tiny.ipynb")
    assert run(src, dest) == 0
    assert "A fix." in target.read_text()


def test_a_file_the_generator_did_not_write_is_kept(lesson_dirs, capsys):
    src, dest = lesson_dirs
    dest.mkdir()
    (dest / "01_tiny.ipynb").write_text("my notes, not a notebook")
    assert run(src, dest) == 1
    assert (dest / "01_tiny.ipynb").read_text() == "my notes, not a notebook"
    assert "REFUSED" in capsys.readouterr().err
    mine = new_notebook(cells=[new_code_cell("x = 1")])
    nbformat.write(mine, dest / "01_tiny.ipynb")
    assert run(src, dest) == 1
    assert nbformat.read(dest / "01_tiny.ipynb", as_version=4).cells[0].source == "x = 1"


def test_broken_markers_fail_the_command(lesson_dirs, capsys):
    src, dest = lesson_dirs
    nb = nbformat.read(src / "01_tiny.ipynb", as_version=4)
    nb.cells[1].source = nb.cells[1].source.replace("    # END SOLUTION\n", "")
    nbformat.write(nb, src / "01_tiny.ipynb")
    assert run(src, dest) == 2
    assert "01_tiny.ipynb, cell 1" in capsys.readouterr().err
    assert not dest.exists()


def _execute(path: Path, timeout: int = 180) -> nbformat.NotebookNode:
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    # kernel "python3": jupyter_client starts it with this interpreter (the venv's)
    NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    return nb


def _texts(nb: nbformat.NotebookNode) -> str:
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", "") + str(out.get("data", {}).get("text/plain", "")))
    return "\n".join(parts)


@pytest.mark.slow
def test_student_copy_of_an_exercise_runs_and_reports_not_attempted(lesson_dirs):
    src, dest = lesson_dirs
    assert run(src, dest) == 0
    nb = _execute(dest / "01_tiny.ipynb")
    text = _texts(nb)
    assert "not_attempted" in text and "not attempted yet" in text
    instructor = _execute(src / "01_tiny.ipynb")
    assert "passed" in _texts(instructor) and "Reference solution for mlm_loss" in _texts(
        instructor
    )


# --------------------------------------------------------------------------- the committed course

LESSONS = sorted(NOTEBOOKS.glob("*.ipynb")) if NOTEBOOKS.is_dir() else []
NO_LESSONS = "notebooks/ has no lessons yet, so there are no student copies to compare or run"


@pytest.mark.skipif(not LESSONS, reason=NO_LESSONS)
def test_committed_student_copies_are_up_to_date(capsys):
    code = main(["--src", str(NOTEBOOKS), "--dest", str(STUDENT), "--check"])
    assert code == 0, "student copies are stale; run `make student`:\n" + capsys.readouterr().err


def _code(nb: nbformat.NotebookNode) -> list[ast.Module]:
    """The code cells of ``nb`` parsed (IPython's ``%`` lines as ``pass``)."""
    trees = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            lines = [  # a magic becomes `pass` at its indentation
                line[: len(line) - len(line.lstrip())] + "pass"
                if line.lstrip().startswith("%")
                else line
                for line in cell.source.split("\n")
            ]
            trees.append(ast.parse("\n".join(lines)))
    return trees


def _stubbed_functions(tree: ast.Module) -> set[str]:
    """Top-level functions whose body raises the stub; a stub outside a function is an error."""
    names = set()
    for node in tree.body:
        raises = [n for n in ast.walk(node) if isinstance(n, ast.Raise)]
        stub = [r for r in raises if "NotImplementedError" in ast.unparse(r)]
        if stub:
            assert isinstance(node, ast.FunctionDef), (
                f"a stub outside a function: {ast.unparse(node)[:80]}"
            )
            names.add(node.name)
    return names


def _bad_uses(tree: ast.Module, names: set[str]) -> list[str]:
    """Uses of ``names`` other than as an argument of ``check(...)``: they would call a stub."""
    allowed = {
        id(arg)
        for call in ast.walk(tree)
        if isinstance(call, ast.Call) and ast.unparse(call.func) in {"check", "assert_check"}
        for arg in [*call.args, *(k.value for k in call.keywords)]
    }
    for guard in ast.walk(tree):  # try: ... except NotImplementedError: ...
        if isinstance(guard, ast.Try) and any(
            h.type is not None and "NotImplementedError" in ast.unparse(h.type)
            for h in guard.handlers
        ):
            allowed |= {id(n) for stmt in guard.body for n in ast.walk(stmt)}
    return [
        ast.unparse(n)
        for n in ast.walk(tree)
        if isinstance(n, ast.Name)
        and n.id in names
        and isinstance(n.ctx, ast.Load)
        and id(n) not in allowed
    ]


def _bound(tree: ast.Module) -> set[str]:
    return {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    } | {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


@pytest.mark.skipif(not LESSONS, reason=NO_LESSONS)
@pytest.mark.parametrize("name", [p.name for p in LESSONS])
def test_committed_student_copy_runs_where_the_lesson_runs(name):
    """Without executing it: the copy is the lesson (which strict nbval runs) less its solution
    cells, with stubs only inside exercise functions that nothing but ``check`` calls, and no
    later cell needs a name that only a removed solution cell defined."""
    lesson = nbformat.read(NOTEBOOKS / name, as_version=4)
    copy = nbformat.read(STUDENT / name, as_version=4)
    removed = set().union(*[_bound(t) for c, t in _cells_and_trees(lesson) if is_solution_cell(c)])
    kept_bound: set[str] = set()
    stubbed: set[str] = set()
    for tree in _code(copy):
        stubbed |= _stubbed_functions(tree)
        assert not _bad_uses(tree, stubbed), f"{name}: a stub is called: {_bad_uses(tree, stubbed)}"
        loads = {
            n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
        }
        assert not (loads & removed) - kept_bound - _bound(tree), f"{name}: needs a removed cell"
        kept_bound |= _bound(tree)
    exercises = sum(has_solution_region(c.source) for c in lesson.cells if c.cell_type == "code")
    demos = set().union(*[_stubbed_functions(t) for t in _code(lesson)])  # stubs shown as is
    assert len(stubbed) == exercises + len(demos)


def _cells_and_trees(nb: nbformat.NotebookNode) -> list[tuple[nbformat.NotebookNode, ast.Module]]:
    code = [c for c in nb.cells if c.cell_type == "code"]
    return list(zip(code, _code(nb)))


def test_the_structural_check_finds_a_stub_that_is_called():
    tree = ast.parse("def my_f(x):\n    raise NotImplementedError('Your code here')\n")
    assert _stubbed_functions(tree) == {"my_f"}
    assert _bad_uses(ast.parse("check('f', my_f)"), {"my_f"}) == []
    assert _bad_uses(ast.parse("y = my_f(3)"), {"my_f"}) == ["my_f"]
    guarded = "try:\n    my_f(3)\nexcept NotImplementedError:\n    pass\n"
    assert _bad_uses(ast.parse(guarded), {"my_f"}) == []
    assert _bad_uses(ast.parse(guarded.replace("NotImplementedError", "KeyError")), {"my_f"})
    with pytest.raises(AssertionError, match="outside a function"):
        _stubbed_functions(ast.parse("raise NotImplementedError('Your code here')"))
