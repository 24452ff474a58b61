"""Each lesson's stated time, measured: ``python -m tools.reading_time [--write | --check]``.

A lesson states, in its opening cell, how long it takes to work through. The number is computed,
not guessed, from what the lesson holds:

    minutes = words of prose / 130 + lines of code / 8 + 10 per checked exercise
              + 3 per quiz + the time to run all cells

130 words a minute is a careful reading pace for technical prose; 8 lines a minute is reading code
closely enough to predict what it prints. The run time is the wall time ``make execute`` measured
(stored in ``docs/lesson_times.json`` by ``tools/execute.py``). The statement also gives the counts,
so a reader can judge the estimate, and ``--check`` (run by the tests) fails when a lesson changed
and its statement did not.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
TIMES_FILE = ROOT / "docs" / "lesson_times.json"
WORDS_PER_MINUTE = 130
CODE_LINES_PER_MINUTE = 8
MINUTES_PER_EXERCISE = 10
MINUTES_PER_QUIZ = 3
STATEMENT = re.compile(r"\*\*Time\*\*:[^\n]*(?:\n(?!\n)[^\n]*)*")


@dataclass(frozen=True)
class Estimate:
    words: int
    code_lines: int
    exercises: int
    quizzes: int
    run_seconds: float

    @property
    def minutes(self) -> int:
        """The total, rounded to the nearest 5 minutes."""
        total = (
            self.words / WORDS_PER_MINUTE
            + self.code_lines / CODE_LINES_PER_MINUTE
            + MINUTES_PER_EXERCISE * self.exercises
            + MINUTES_PER_QUIZ * self.quizzes
            + self.run_seconds / 60
        )
        return max(5, 5 * round(total / 5))

    def statement(self) -> str:
        exercises = f"{self.exercises} checked exercise{'s' * (self.exercises != 1)}"
        quiz = f", {self.quizzes} quiz" if self.quizzes else ""
        run = 10 * math.ceil(self.run_seconds / 10)
        return (
            f"**Time**: about {self.minutes} minutes to work through ({self.words:,} words of "
            f"prose, {self.code_lines} lines of code, {exercises}{quiz}); running all cells takes "
            f"about {run} s on a 2-core laptop CPU."
        )


def _code_lines(source: str) -> int:
    return sum(
        1 for line in source.splitlines() if line.strip() and not line.strip().startswith("#")
    )


def estimate(nb: nbformat.NotebookNode, run_seconds: float) -> Estimate:
    """Count what ``nb`` holds; the Time statement itself is not counted."""
    prose = [STATEMENT.sub("", c.source) for c in nb.cells if c.cell_type == "markdown"]
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    return Estimate(
        words=sum(len(re.findall(r"\w+", text)) for text in prose),
        code_lines=sum(_code_lines(source) for source in code),
        exercises=sum("# BEGIN SOLUTION" in source for source in code),
        quizzes=sum("quiz(" in source for source in code),
        run_seconds=run_seconds,
    )


def _run_seconds() -> dict[str, float]:
    return json.loads(TIMES_FILE.read_text(encoding="utf-8"))["seconds"]


def stale(write: bool) -> list[str]:
    """Lessons whose statement differs from the estimate (rewritten in place when ``write``)."""
    times, out = _run_seconds(), []
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        (cell,) = [c for c in nb.cells if c.cell_type == "markdown" and STATEMENT.search(c.source)]
        wanted = estimate(nb, times[path.stem]).statement()
        if STATEMENT.search(cell.source).group(0) != wanted:
            out.append(path.name)
            if write:
                start, end = STATEMENT.search(cell.source).span()
                cell.source = cell.source[:start] + wanted + cell.source[end:]
                nbformat.write(nb, path)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite stale statements")
    args = parser.parse_args(argv)
    changed = stale(write=args.write)
    for name in changed:
        print(f"{'updated' if args.write else 'STALE'}  {name}")
    return 0 if args.write or not changed else 1


if __name__ == "__main__":
    sys.exit(main())
