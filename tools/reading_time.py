"""Each lesson's stated time, measured: ``python -m tools.reading_time [--write | --check]``.

A lesson states, in its opening cell, how long it takes to work through, as a range: a quick
learner who reads once and solves each exercise at the first or second try, and a careful one who
studies every output, plays with the widget, answers every What-if question and needs the hints.
The range is computed, not guessed, from what the lesson holds (``Estimate.minutes``): prose and
code at a reading pace, each stored output line, each figure or table, the widget, each
predict-then-reveal, each quiz question and each What-if question at a rate per item, each
exercise at its own time (``EXERCISE_MINUTES``: writing ``make_nsp_pairs`` is not writing
``mlm_loss``), and the run time that ``make execute`` measured (``docs/lesson_times.json``).

The rates are assumptions, written down so that they can be argued with: an earlier formula
(prose, code, 10 minutes an exercise, 3 a quiz) left out reading outputs and tables, playing with
widgets and What-if questions, and gave every exercise the same 10 minutes (writing
``make_nsp_pairs`` takes 30 to 60). ``python -m tools.reading_time --total`` prints the course's
total range. The statement also gives the counts, so a reader can judge the estimate, and
``--check`` (run by the tests) fails when a lesson changed and its statement did not.
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

from tools.markers import is_solution_cell, strip_solutions

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
TIMES_FILE = ROOT / "docs" / "lesson_times.json"
STATEMENT = re.compile(r"\*\*Time\*\*:[^\n]*(?:\n(?!\n)[^\n]*)*")
WIDGET = "application/vnd.jupyter.widget-view+json"
# Rates for (quick, careful) learners: prose and code in items a minute, the rest in minutes
# an item.
WORDS_PER_MINUTE = (180, 130)
CODE_LINES_PER_MINUTE = (14, 10)  # outside the solution regions: the learner writes those
OUTPUT_LINES_PER_MINUTE = (60, 30)
MINUTES_PER = {
    "pictures": (0.25, 0.5),  # a figure or a table to study
    "widgets": (2, 4),  # playing with a lesson's widget
    "predictions": (1, 2),  # a predict-then-reveal
    "quiz_questions": (0.5, 1),
    "what_ifs": (1.5, 3),  # change a cell, run it again, explain
}
# Writing one exercise, by the name of the learner's function (without its my_ prefix).
EXERCISE_MINUTES = {
    "mask_tokens": (10, 20),
    "select_whole_words": (8, 15),
    "mlm_loss": (5, 10),
    "clm_loss": (5, 10),
    "sees_the_future": (5, 10),
    "truncate_seq_pair": (8, 15),
    "make_nsp_pairs": (30, 60),
    "bert_pretraining_loss": (8, 15),
    "rank_loss": (8, 15),
    "chunked_cross_entropy": (12, 25),
    "diagnoses": (15, 30),  # the bug zoo: eight cases to diagnose
    "flatten_documents": (10, 20),
    "assistant_labels": (10, 20),
    "sequence_logprobs": (8, 15),
    "group_advantages": (5, 10),
    "grpo_loss": (10, 20),
    "load_balancing_loss_func": (10, 20),
    "mtp_labels": (5, 10),
    "label_smoothed_loss": (8, 15),
}
DEFAULT_EXERCISE_MINUTES = (10, 20)


@dataclass(frozen=True)
class Estimate:
    words: int
    code_lines: int
    output_lines: int
    pictures: int
    widgets: int
    predictions: int
    quiz_questions: int
    what_ifs: int
    exercises: tuple[str, ...]
    run_seconds: float

    def _total(self, side: int) -> float:
        items = sum(getattr(self, name) * rates[side] for name, rates in MINUTES_PER.items())
        return (
            self.words / WORDS_PER_MINUTE[side]
            + self.code_lines / CODE_LINES_PER_MINUTE[side]
            + self.output_lines / OUTPUT_LINES_PER_MINUTE[side]
            + items
            + sum(EXERCISE_MINUTES.get(e, DEFAULT_EXERCISE_MINUTES)[side] for e in self.exercises)
            + self.run_seconds / 60
        )

    @property
    def minutes(self) -> tuple[int, int]:
        """(quick, careful) totals, each rounded to the nearest 5 minutes."""
        return tuple(max(5, 5 * round(self._total(side) / 5)) for side in (0, 1))  # type: ignore[return-value]

    def statement(self) -> str:
        low, high = self.minutes
        n = len(self.exercises)
        counts = (
            f"{self.words:,} words of prose, {self.code_lines} lines of code, {self.output_lines} "
            f"output lines, {self.pictures} figures and tables, {n} checked "
            f"exercise{'s' * (n != 1)}, {self.quiz_questions} quiz questions, {self.what_ifs} "
            "What-if questions"
        )
        run = 10 * math.ceil(self.run_seconds / 10)
        return (
            f"**Time**: {low}-{high} minutes to work through ({counts}); running all cells "
            f"takes about {run} s on a 2-core laptop CPU."
        )


def _code_lines(source: str) -> int:
    return sum(
        1 for line in source.splitlines() if line.strip() and not line.strip().startswith("#")
    )


def _outputs(nb: nbformat.NotebookNode) -> dict[str, int]:
    """Output lines to read, pictures (figures, tables) to study, widgets to play with."""
    counts = {"output_lines": 0, "pictures": 0, "widgets": 0}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        plain_widget = (
            "quiz(" in cell.source or "Predict(" in cell.source or ".reveal(" in cell.source
        )
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if out.get("output_type") == "stream":
                counts["output_lines"] += len(out["text"].splitlines())
            elif WIDGET in data:
                counts["widgets"] += not plain_widget
            elif "image/png" in data:
                counts["pictures"] += 1
            elif "text/html" in data:
                counts["pictures"] += data["text/html"].count("<table")
            elif "text/plain" in data:
                counts["output_lines"] += len(data["text/plain"].splitlines())
    return counts


def estimate(nb: nbformat.NotebookNode, run_seconds: float, quiz_questions: int) -> Estimate:
    """Count what ``nb`` holds; the Time statement itself is not counted."""
    prose = [STATEMENT.sub("", c.source) for c in nb.cells if c.cell_type == "markdown"]
    code = [c.source for c in nb.cells if c.cell_type == "code" and not is_solution_cell(c)]
    exercises = [
        re.search(r"def (?:my_)?(\w+)", source) for source in code if "# BEGIN SOLUTION" in source
    ]
    return Estimate(
        words=sum(len(re.findall(r"\w+", text)) for text in prose),
        code_lines=sum(_code_lines(strip_solutions(source)) for source in code),
        predictions=sum("predict" in c.metadata.get("tags", []) for c in nb.cells),
        quiz_questions=quiz_questions,
        what_ifs=sum(
            "<summary>Model answer" in c.source for c in nb.cells if c.cell_type == "markdown"
        ),
        exercises=tuple(m[1] if m else "" for m in exercises),
        run_seconds=run_seconds,
        **_outputs(nb),
    )


def _quiz_questions(path: Path) -> int:
    from lmlessons.exercises.quizzes import QUIZZES

    return len(QUIZZES.get(path.name[:2], ()))


def _run_seconds() -> dict[str, float]:
    """Each lesson's measured run time; every lesson must have one."""
    seconds = json.loads(TIMES_FILE.read_text(encoding="utf-8"))["seconds"]
    missing = [p.stem for p in sorted(NOTEBOOKS.glob("*.ipynb")) if p.stem not in seconds]
    if missing:
        raise ValueError(
            f"no measured run time for {', '.join(missing)} in docs/lesson_times.json: run "
            "`make execute` (or `python -m tools.execute NN` for one lesson)"
        )
    return seconds


def estimates() -> dict[str, Estimate]:
    """Every lesson's estimate, by file stem."""
    times, out = _run_seconds(), {}
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        out[path.stem] = estimate(nb, times[path.stem], _quiz_questions(path))
    return out


def stale(write: bool) -> list[str]:
    """Lessons whose statement differs from the estimate (rewritten in place when ``write``)."""
    times, out = _run_seconds(), []
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        (cell,) = [c for c in nb.cells if c.cell_type == "markdown" and STATEMENT.search(c.source)]
        wanted = estimate(nb, times[path.stem], _quiz_questions(path)).statement()
        found = STATEMENT.search(cell.source)
        assert found is not None  # the cell was chosen for holding it
        if found.group(0) != wanted:
            out.append(path.name)
            if write:
                start, end = found.span()
                cell.source = cell.source[:start] + wanted + cell.source[end:]
                nbformat.write(nb, path)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite stale statements")
    parser.add_argument("--total", action="store_true", help="print the course's total range")
    args = parser.parse_args(argv)
    if args.total:
        ranges = [e.minutes for e in estimates().values()]
        low, high = (sum(r[side] for r in ranges) / 60 for side in (0, 1))
        print(f"the whole course: {low:.1f}-{high:.1f} h ({len(ranges)} lessons)")
        return 0
    changed = stale(write=args.write)
    for name in changed:
        print(f"{'updated' if args.write else 'STALE'}  {name}")
    return 0 if args.write or not changed else 1


if __name__ == "__main__":
    sys.exit(main())
