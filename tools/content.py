"""Keep the lessons' What-if model answers equal to their data: ``python -m tools.content``.

The model answer of a What-if question is data, ``lmlessons/data/content/whatif/NN.toml``, keyed
by a stable id: ``"01.2"`` answers lesson 01's question "**2. What if ...?**". The lesson shows it
folded, in a markdown cell of the form :data:`ANSWER_CELL`, and that cell names its entry in its
metadata: ``"lmlessons": {"whatif": "01.2"}``.

Why cell metadata and not, say, an HTML comment in the cell: the key is invisible to the learner
(in JupyterLab, on the website, in the student copy's text), it survives any edit of the answer or
of the cells around it (nothing is matched by position or by wording), the student copy keeps it
(``tools.student`` copies cell metadata and hashes only sources), and it leaves the cell's text
exactly the answer cell, so the tool can rebuild that text from the data alone.

``--check`` writes nothing and exits 1 when a lesson's answer cell differs from its data, an id
has no cell or two, a cell names an id that has no data, or a "Model answer" cell has no id.
``--write`` writes the data into the answer cells of ``notebooks/`` and regenerates the student
copies of the lessons it changed (never over a learner's edits: see ``tools.student``).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import nbformat

from lmlessons.course.content import load, names
from tools import student

ANSWER_CELL = (
    "<details>\n<summary>Model answer (open it once you have your own)</summary>\n\n"
    "{answer}\n\n</details>"
)
MARKER = "<summary>Model answer"  # how an answer cell is recognised, with or without its key
KEY = "whatif"  # under the cell metadata's "lmlessons"


def answer_cell(answer: str) -> str:
    """The source of the markdown cell that shows ``answer`` folded."""
    return ANSWER_CELL.format(answer=answer.strip("\n"))


def whatif_id(cell: nbformat.NotebookNode) -> str | None:
    """The What-if id a cell's metadata names, or None."""
    value = cell.get("metadata", {}).get(student.META_KEY, {}).get(KEY)
    return value if isinstance(value, str) else None


def answers(lesson: str) -> dict[str, str]:
    """Lesson ``lesson``'s model answers by id (none for a lesson without a What-if file)."""
    return dict(load(f"whatif/{lesson}")) if lesson in names("whatif") else {}


def lesson_problems(path: Path) -> list[str]:
    """What is wrong between the notebook at ``path`` and its What-if data, one line each."""
    data = answers(path.name[:2])
    nb = nbformat.read(path, as_version=4)
    problems, used = [], Counter[str]()
    for index, cell in enumerate(nb.cells):
        wid, where = whatif_id(cell), f"{path.name}, cell {index}"
        if wid is None:
            if cell.cell_type == "markdown" and MARKER in cell.source:
                problems.append(f'{where}: a model answer without its metadata key "{KEY}"')
            continue
        used[wid] += 1
        if wid not in data:
            problems.append(f"{where}: What-if id {wid!r} has no entry in whatif/{path.name[:2]}")
        elif cell.source != answer_cell(data[wid]):
            problems.append(f"{where}: the answer {wid!r} differs from its data")
    for wid in data:
        if used[wid] != 1:
            problems.append(f"{path.name}: What-if id {wid!r} is used by {used[wid]} cells, not 1")
    return problems


def problems(notebooks: Path) -> list[str]:
    """Every problem of every lesson in ``notebooks``, and What-if data without its lesson."""
    lessons = _lessons(notebooks)
    found = [problem for path in lessons for problem in lesson_problems(path)]
    shown = {path.name[:2] for path in lessons}
    found += [
        f"whatif/{n}.toml: no lesson {n} in {notebooks}" for n in names("whatif") if n not in shown
    ]
    return found


def write_lesson(path: Path) -> bool:
    """Write the data into the answer cells of the notebook at ``path``; True if it changed."""
    data = answers(path.name[:2])
    nb = nbformat.read(path, as_version=4)
    changed = False
    for cell in nb.cells:
        wid = whatif_id(cell)
        if wid in data and cell.source != answer_cell(data[wid]):
            cell.source = answer_cell(data[wid])
            changed = True
    if changed:
        path.write_text(student.render(nb), encoding="utf8")
    return changed


def write_student_copy(source: Path, dest: Path) -> str | None:
    """Regenerate the student copy of ``source`` in ``dest``; the reason if it was refused."""
    target = dest / source.name
    if target.exists() and (reason := student.learner_change(target)) is not None:
        return reason
    nb = student.make_student_notebook(nbformat.read(source, as_version=4), source.name)
    dest.mkdir(parents=True, exist_ok=True)
    target.write_text(student.render(nb), encoding="utf8")
    return None


def _lessons(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.ipynb") if not p.name.startswith("."))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.content",
        description="Check or write the lessons' What-if model answers from their data.",
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="write nothing; exit 1 on a mismatch")
    mode.add_argument("--write", action="store_true", help="write the data into the lessons")
    parser.add_argument("--notebooks", type=Path, help="the lessons (default: notebooks/)")
    parser.add_argument("--student", type=Path, help="the student copies (default: student/)")
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parents[1]
    notebooks = args.notebooks or root / "notebooks"
    status = 0
    for path in _lessons(notebooks) if args.write else []:
        if write_lesson(path):
            print(f"wrote     {path.name}")
            reason = write_student_copy(path, args.student or root / "student")
            if reason is not None:
                print(f"REFUSED   student copy of {path.name}: {reason}", file=sys.stderr)
                status = 1
    found = problems(notebooks)
    for problem in found:
        print(problem, file=sys.stderr)
    if found:
        print(
            "Edit the answer in lmlessons/data/content/whatif/NN.toml (not in the lesson), key its "
            'cell with metadata "lmlessons": {"whatif": "NN.n"}, then run python -m tools.content '
            "--write.",
            file=sys.stderr,
        )
    return 1 if found else status


if __name__ == "__main__":
    raise SystemExit(main())
