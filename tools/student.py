"""Generate the student copies of the lessons: ``python -m tools.student`` (``make student``).

One source per lesson: ``notebooks/*.ipynb`` are the complete, executed instructor versions.
Each student copy ``student/<same name>.ipynb`` is made from it by

- replacing every region between the lines ``# BEGIN SOLUTION`` and ``# END SOLUTION`` in a
  code cell by ``raise NotImplementedError("Your code here")`` at the marker's indentation (the
  region must be inside a function body, so that running the cell does not raise);
- removing every cell tagged ``solution`` (cell metadata tags);
- clearing all outputs and execution counts (and per-cell execution timings, widget state).

Learners' work is never overwritten silently. Each copy records a hash of its cells' sources in
its metadata (``lmlessons.sources_sha256``). Before replacing a copy, the generator recomputes
that hash: if any cell was edited, added or removed since it was generated, the file is left
alone and the command fails, naming the file; ``--force`` overwrites it anyway. Running cells
does not count as a change (outputs are not hashed), so an executed but unedited copy is
regenerated.

``--check`` writes nothing and exits 1 if any copy is missing or differs from what the
generator would write now (the test suite uses it).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import nbformat

from tools.markers import (  # noqa: F401  (re-exported: the tests and older callers use them)
    BEGIN,
    END,
    SOLUTION_TAG,
    STUB,
    SolutionMarkerError,
    is_solution_cell,
    strip_solutions,
)

META_KEY = "lmlessons"


def sources_sha256(nb: nbformat.NotebookNode) -> str:
    """Hash of the cells' types and sources: what a learner edits (outputs are not included)."""
    cells = [[cell.cell_type, cell.source] for cell in nb.cells]
    return hashlib.sha256(json.dumps(cells, ensure_ascii=False).encode("utf8")).hexdigest()


def make_student_notebook(nb: nbformat.NotebookNode, source_name: str) -> nbformat.NotebookNode:
    """The student copy of ``nb`` (which is not modified)."""
    nb = copy.deepcopy(nb)
    cells = []
    for index, cell in enumerate(nb.cells):
        if is_solution_cell(cell):
            continue
        if cell.cell_type == "code":
            cell.source = strip_solutions(cell.source, f"{source_name}, cell {index}")
            cell.outputs = []
            cell.execution_count = None
        cell.get("metadata", {}).pop("execution", None)  # nbclient's per-cell timings
        if "id" not in cell and nb.get("nbformat_minor", 0) >= 5:
            cell["id"] = hashlib.sha1(f"{source_name}:{index}".encode()).hexdigest()[:8]
        cells.append(cell)
    nb.cells = cells
    nb.metadata.pop("widgets", None)  # saved widget state belongs to the executed version
    nb.metadata[META_KEY] = {
        "student_copy": True,
        "source": f"notebooks/{source_name}",
        "sources_sha256": sources_sha256(nb),
    }
    return nb


def render(nb: nbformat.NotebookNode) -> str:
    """The exact file text the generator writes (as Jupyter saves: 1-space indent, final
    newline)."""
    text = nbformat.writes(nb)
    return text if text.endswith("\n") else text + "\n"


def learner_change(path: Path) -> str | None:
    """Why ``path`` must not be overwritten, or None if it is an unedited generated copy."""
    try:
        existing = nbformat.read(path, as_version=4)
    except Exception as exc:  # a half-saved or hand-made file: keep it
        return f"it is not a notebook this generator can read ({type(exc).__name__})"
    meta = existing.metadata.get(META_KEY, {})
    if not meta.get("student_copy"):
        return "it was not written by this generator"
    if sources_sha256(existing) != meta.get("sources_sha256"):
        return "its cells were edited after it was generated"
    return None


@dataclass
class Report:
    written: list[Path]
    unchanged: list[Path]
    refused: list[tuple[Path, str]]
    stale: list[tuple[Path, str]]

    @property
    def ok(self) -> bool:
        return not self.refused and not self.stale


def _display(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:  # pragma: no cover - another drive on Windows
        return str(path)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf8")
    os.replace(tmp, path)


def sync(src: Path, dest: Path, *, force: bool = False, check: bool = False) -> Report:
    """Generate (or with ``check=True`` only compare) the student copy of every ``src/*.ipynb``."""
    report = Report([], [], [], [])
    sources = sorted(p for p in Path(src).glob("*.ipynb") if not p.name.startswith("."))
    for source in sources:
        target = Path(dest) / source.name
        text = render(make_student_notebook(nbformat.read(source, as_version=4), source.name))
        current = target.read_text(encoding="utf8") if target.exists() else None
        if current == text:
            report.unchanged.append(target)
            continue
        if check:
            report.stale.append((target, "missing" if current is None else "out of date"))
            continue
        if current is not None and not force:
            reason = learner_change(target)
            if reason is not None:
                report.refused.append((target, reason))
                continue
        Path(dest).mkdir(parents=True, exist_ok=True)
        _write_atomic(target, text)
        report.written.append(target)
    if check and Path(dest).is_dir():
        names = {s.name for s in sources}
        for copy_path in sorted(Path(dest).glob("*.ipynb")):
            if copy_path.name in names:
                continue
            try:
                meta = nbformat.read(copy_path, as_version=4).metadata.get(META_KEY, {})
            except Exception:
                continue
            if meta.get("student_copy"):
                report.stale.append((copy_path, "its source notebook no longer exists"))
    return report


def _default_root() -> Path:
    here = Path.cwd()
    if (here / "notebooks").is_dir():
        return here
    return Path(__file__).resolve().parents[1]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.student",
        description="Write student copies of the lessons (stubs instead of solutions, no outputs).",
    )
    parser.add_argument("--src", type=Path, help="instructor notebooks (default: notebooks/)")
    parser.add_argument("--dest", type=Path, help="student copies (default: student/)")
    parser.add_argument(
        "--force",
        action="store_true",
        help="overwrite copies a learner has edited (their edits are lost)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if a copy is missing or out of date",
    )
    args = parser.parse_args(argv)
    root = _default_root()
    src = args.src or root / "notebooks"
    dest = args.dest or root / "student"
    if not src.is_dir():
        print(f"error: no notebook folder {_display(src)}", file=sys.stderr)
        return 2
    try:
        report = sync(src, dest, force=args.force, check=args.check)
    except SolutionMarkerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not (report.written or report.unchanged or report.stale or report.refused):
        print(f"no lessons in {_display(src)}: nothing to do")
    for path in report.written:
        print(f"wrote     {_display(path)}")
    for path in report.unchanged:
        print(f"unchanged {_display(path)}")
    for path, why in report.stale:
        print(
            f"STALE     {_display(path)}: {why}; run `make student` (python -m tools.student)",
            file=sys.stderr,
        )
    for path, why in report.refused:
        print(
            f"REFUSED   {_display(path)}: {why}. Not overwritten, so your work is safe. Move or "
            "rename it to get a fresh copy, or rerun with --force to overwrite it (your edits "
            "would be lost).",
            file=sys.stderr,
        )
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
