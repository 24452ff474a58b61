"""The exercise markers of the lessons: one definition for every tool that reads them.

An instructor lesson marks an exercise body with the lines ``# BEGIN SOLUTION`` and
``# END SOLUTION`` inside the exercise function, and tags cells that give an answer away
``solution``. ``tools/student.py`` replaces each region by :data:`STUB` and drops the tagged
cells; ``tools/classroom.py`` gives nbgrader the same delimiters and stub (its ``ClearSolutions``
preprocessor), so an nbgrader release and a student copy show a learner the same code.
"""

from __future__ import annotations

import re

BEGIN = "# BEGIN SOLUTION"
END = "# END SOLUTION"
STUB = 'raise NotImplementedError("Your code here")'
SOLUTION_TAG = "solution"

_BEGIN_RE = re.compile(r"^(?P<indent>[ \t]*)# BEGIN SOLUTION[ \t]*$")
_END_RE = re.compile(r"^[ \t]*# END SOLUTION[ \t]*$")
_DEF_RE = re.compile(r"^def (?P<name>\w+)\s*\(", re.MULTILINE)


class SolutionMarkerError(ValueError):
    """A ``# BEGIN SOLUTION`` / ``# END SOLUTION`` pair is broken or misplaced."""


def strip_solutions(source: str, where: str = "cell") -> str:
    """Replace each solution region of ``source`` by the stub, keeping the marker's indentation."""
    out: list[str] = []
    begin_line: int | None = None
    for number, line in enumerate(source.split("\n"), start=1):
        begin = _BEGIN_RE.match(line)
        if begin:
            if begin_line is not None:
                raise SolutionMarkerError(
                    f"{where}, line {number}: {BEGIN} inside the region opened at line {begin_line}"
                )
            if not begin["indent"]:
                raise SolutionMarkerError(
                    f"{where}, line {number}: {BEGIN} at the top level; put the region inside the "
                    "exercise function's body, or the student copy would raise as soon as the "
                    "cell runs"
                )
            out.append(begin["indent"] + STUB)
            begin_line = number
        elif _END_RE.match(line):
            if begin_line is None:
                raise SolutionMarkerError(f"{where}, line {number}: {END} without {BEGIN}")
            begin_line = None
        elif begin_line is None:
            out.append(line)
        elif line.strip() and (len(line) - len(line.lstrip())) < len(out[-1]) - len(
            out[-1].lstrip()
        ):
            raise SolutionMarkerError(
                f"{where}, line {number}: a line inside the solution region is indented less "
                f"than {BEGIN}"
            )
    if begin_line is not None:
        raise SolutionMarkerError(f"{where}, line {begin_line}: {BEGIN} is never closed by {END}")
    return "\n".join(out)


def has_solution_region(source: str) -> bool:
    """Whether ``source`` has a ``# BEGIN SOLUTION`` line (an exercise cell)."""
    return any(_BEGIN_RE.match(line) for line in source.split("\n"))


def check_no_stray_markers(source: str, where: str = "cell") -> None:
    """Raise if a marker's text appears other than as a marker line of its own.

    nbgrader finds its delimiters anywhere in a line (``x = 1  # BEGIN SOLUTION`` counts, and so
    does a Markdown cell quoting the marker); the student copies only take whole lines. A stray
    marker would make the two disagree, so the classroom build refuses it.
    """
    for number, line in enumerate(source.split("\n"), start=1):
        stray_begin = BEGIN in line and not _BEGIN_RE.match(line)
        if stray_begin or (END in line and not _END_RE.match(line)):
            raise SolutionMarkerError(
                f"{where}, line {number}: the marker text is not on a line of its own: "
                f"{line.strip()!r}"
            )


def defined_functions(source: str) -> list[str]:
    """The names of the functions ``source`` defines at the top level, in order."""
    return [m["name"] for m in _DEF_RE.finditer(source)]


def is_solution_cell(cell: dict) -> bool:
    """Whether ``cell`` is tagged ``solution`` (left out of every learner's copy)."""
    return SOLUTION_TAG in cell.get("metadata", {}).get("tags", [])
