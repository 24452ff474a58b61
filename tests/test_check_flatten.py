"""Lesson 09's exercise ``flatten_documents`` beyond its attempts (``tests/battery/``) and the
generic tests (stub, hints, solution: ``tests/test_exercises.py``): what a passing result shows."""

from __future__ import annotations

from lmlessons.exercises import _check
from lmlessons.exercises.solutions_part2 import flatten_documents as reference


def test_the_solution_passes_and_names_transformers_collator() -> None:
    result = _check("flatten_documents", reference, watch=False)  # the course's own: unwatched
    assert result.passed, str(result)
    assert len(result.passed_checks) == 4
    assert "DataCollatorWithFlattening" in str(result)
