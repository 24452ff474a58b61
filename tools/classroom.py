"""Build an nbgrader course from the lessons: ``python -m tools.classroom`` (``make classroom``).

Writes, outside the tracked tree (default ``_build/classroom``), a course folder ready for
``nbgrader generate_assignment``: ``nbgrader_config.py`` and every lesson as its own assignment,
``source/<lesson>/<lesson>.ipynb``. Each source notebook is the instructor lesson with

- the cells tagged ``solution`` left out (they would give the answer away; nbgrader has no
  such tag) and the outputs cleared;
- nbgrader cell metadata (schema 3, as nbgrader 0.9 writes it), derived from the lesson's own
  markers (``tools/markers.py``, the ones ``tools/student.py`` reads): a cell with a
  ``# BEGIN SOLUTION`` region is a *solution* cell; the cell ``check("NAME", my_fn)`` that
  follows it is an *autograded test* cell worth ``POINTS[NAME]``, with a hidden test added on
  top; a cell already holding the stub (lesson 00's demonstration) stays free to edit; every
  other cell is read-only (``locked``). Grade ids are stable: ``answer-<function>``,
  ``check-<exercise>``, ``cell-<cell id>``.

The hidden test is ``assert_check("NAME", my_fn)``, which raises unless the check passes. nbgrader
removes it from the release (so the learner's check cell is exactly the student copy's, and
running a release top to bottom never crashes) and puts it back when it autogrades, where a
failing check fails the cell: 0 points, and the feedback shows the checker's explanation.
``nbgrader_config.py`` gives ``ClearSolutions`` the markers and the stub of ``tools/markers.py``,
so a release shows what ``student/`` shows.

Files nbgrader or a teacher wrote (gradebook, release, submissions) are never touched; the
source notebooks and the config are rewritten (delete the config's first line to keep your edits).
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import nbformat

from tools.markers import (
    BEGIN,
    END,
    STUB,
    SolutionMarkerError,
    check_no_stray_markers,
    defined_functions,
    has_solution_region,
    is_solution_cell,
    strip_solutions,
)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DEST = Path("_build/classroom")
CELL_TIMEOUT_S = 120  # one cell while autograding; a whole lesson runs in under 20 s
SCHEMA_VERSION = 3  # nbgrader 0.9's cell metadata schema
COURSE_ID = "lmlessons"  # nbgrader's course id, on a hub too

# Points per exercise (docs/teaching.md shows this table; its test keeps the two equal).
POINTS: dict[str, int] = {
    "mask_tokens": 2,
    "select_whole_words": 2,
    "mlm_loss": 1,
    "clm_loss": 1,
    "truncate_seq_pair": 1,
    "make_nsp_pairs": 3,
    "bert_pretraining_loss": 1,
    "rank_loss": 2,
    "chunked_cross_entropy": 2,
    "bug_zoo": 2,
    "flatten_documents": 2,
    "assistant_labels": 2,
    "sequence_logprobs": 2,
    "group_advantages": 1,
    "grpo_loss": 2,
    "load_balancing_loss_func": 2,
    "mtp_labels": 1,
    "label_smoothed_loss": 2,
}

HIDDEN_BEGIN = "### BEGIN HIDDEN TESTS"
HIDDEN_END = "### END HIDDEN TESTS"
HIDDEN_TEST = (
    f"{HIDDEN_BEGIN}\n"
    "# The autograder's test (nbgrader removes it from the release): 0 points unless it passes.\n"
    "from lmlessons.exercises import assert_check\n\n"
    'assert_check("{name}", {fn})\n'
    f"{HIDDEN_END}\n"
)
CONFIG_HEADER = "# Written by `make classroom`: delete this line to keep your edits."

_CHECK_RE = re.compile(r'\Acheck\("(?P<name>\w+)", (?P<fn>\w+)\)\s*\Z')


def _nbgrader(
    grade_id: str,
    *,
    solution: bool = False,
    grade: bool = False,
    locked: bool = False,
    points: int = 0,
) -> dict:
    """A cell's ``metadata.nbgrader`` as nbgrader 0.9's "Create Assignment" toolbar writes it."""
    meta = {
        "grade": grade,
        "grade_id": grade_id,
        "locked": locked,
        "schema_version": SCHEMA_VERSION,
        "solution": solution,
        "task": False,
    }
    if grade:
        meta["points"] = points
    return meta


def _mark_cell(
    cell: nbformat.NotebookNode, cell_id: str, answers: set[str], where: str
) -> list[str]:
    """Give ``cell`` its nbgrader metadata; return the functions it defines if it is an answer
    cell (``answers``: those of the answer cells above it)."""
    check_no_stray_markers(cell.source, where)
    for delimiter in (HIDDEN_BEGIN[4:], HIDDEN_END[4:]):
        if delimiter in cell.source:
            raise SolutionMarkerError(f"{where}: nbgrader's {delimiter!r} in a lesson cell")
    if cell.cell_type == "code" and has_solution_region(cell.source):
        strip_solutions(cell.source, where)  # the same validation as the student copies
        names = defined_functions(cell.source)
        if not names:
            raise SolutionMarkerError(f"{where}: a solution region outside any function")
        cell.metadata["nbgrader"] = _nbgrader(f"answer-{names[0]}", solution=True)
        return names
    check = _CHECK_RE.match(cell.source) if cell.cell_type == "code" else None
    if check and check["fn"] in answers:
        name = check["name"]
        if name not in POINTS:
            raise SolutionMarkerError(f"{where}: exercise {name!r} has no points in POINTS")
        cell.source = HIDDEN_TEST.format(name=name, fn=check["fn"]) + cell.source
        cell.metadata["nbgrader"] = _nbgrader(
            f"check-{name}", grade=True, locked=True, points=POINTS[name]
        )
    elif cell.cell_type == "code" and STUB in cell.source:
        cell.metadata.pop("nbgrader", None)  # a practice cell the learner may edit
    else:
        cell.metadata["nbgrader"] = _nbgrader(f"cell-{cell_id}", locked=True)
    return []


def source_notebook(nb: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """The nbgrader source version of the instructor lesson ``nb`` (which is not modified)."""
    nb = copy.deepcopy(nb)
    nb.cells = [cell for cell in nb.cells if not is_solution_cell(cell)]
    answers: set[str] = set()
    grade_ids: set[str] = set()
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.metadata.pop("execution", None)
        cell_id = cell.get("id", str(index))  # nbformat < 4.5 has no cell ids
        where = f"{name}, cell {index} (id {cell_id})"
        answers.update(_mark_cell(cell, cell_id, answers, where))
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in grade_ids:
            raise SolutionMarkerError(f"{where}: a second cell would have grade id {grade_id!r}")
        if grade_id:
            grade_ids.add(grade_id)
    nb.metadata.pop("widgets", None)  # saved widget state belongs to the executed outputs
    return nb


def config_text(timeout: int = CELL_TIMEOUT_S) -> str:
    """``nbgrader_config.py``: the lessons' markers and stub, the autograder's time limit."""
    return f"""{CONFIG_HEADER}
# Run nbgrader in this folder (the course root). docs/teaching.md in lmlessons explains the steps.
c = get_config()  # noqa: F821

c.CourseDirectory.course_id = "{COURSE_ID}"
# Exercise bodies sit between the lessons' own markers; the release gets the student copies' stub.
c.ClearSolutions.begin_solution_delimeter = {BEGIN!r}
c.ClearSolutions.end_solution_delimeter = {END!r}
c.ClearSolutions.code_stub = {{"python": {STUB!r}}}
c.ClearHiddenTests.begin_test_delimeter = {HIDDEN_BEGIN!r}
c.ClearHiddenTests.end_test_delimeter = {HIDDEN_END!r}
# A cell that runs longer than this (a learner's endless loop) is interrupted: that test fails,
# the rest of the notebook and the other submissions are still graded.
c.Execute.timeout = {int(timeout)}
c.Execute.interrupt_on_timeout = True
"""


def _write_config(path: Path, text: str) -> bool:
    """Write the config ``text`` to ``path``, unless a teacher took it over (deleted the header
    line): then write nothing and return False."""
    if path.exists() and not path.read_text(encoding="utf8").startswith(CONFIG_HEADER):
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf8")
    return True


def build(
    src: Path, dest: Path, lessons: Sequence[str] = (), timeout: int = CELL_TIMEOUT_S
) -> list[Path]:
    """Write the course folder ``dest`` from the lessons ``src/*.ipynb``; return what it wrote.

    ``lessons``: file names or prefixes (``"02"``) to take; all lessons if empty.
    """
    sources = sorted(p for p in Path(src).glob("*.ipynb") if not p.name.startswith("."))
    if lessons:
        sources = [p for p in sources if any(p.name.startswith(x) for x in lessons)]
        if not sources:
            raise FileNotFoundError(f"no lesson in {src} starts with {', '.join(lessons)}")
    written = []
    for lesson in sources:
        nb = source_notebook(nbformat.read(lesson, as_version=4), lesson.name)
        target = Path(dest) / "source" / lesson.stem / lesson.name
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
        written.append(target)
    config = Path(dest) / "nbgrader_config.py"
    if not _write_config(config, config_text(timeout)):
        print(f"kept {config}: it was edited (its first line is not the generator's)")
    else:
        written.append(config)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.classroom", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("lessons", nargs="*", help="lesson names or prefixes (default: all)")
    parser.add_argument("--src", type=Path, default=ROOT / "notebooks", help="instructor lessons")
    parser.add_argument(
        "--dest", type=Path, default=DEFAULT_DEST, help=f"course folder (default: {DEFAULT_DEST})"
    )
    parser.add_argument(
        "--timeout", type=int, default=CELL_TIMEOUT_S, help="seconds per cell when autograding"
    )
    args = parser.parse_args(argv)
    try:
        written = build(args.src, args.dest, args.lessons, args.timeout)
    except (SolutionMarkerError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    print(f"\nNext: cd {args.dest} && nbgrader generate_assignment 02_mlm_loss (docs/teaching.md)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
