"""Lesson 09's exercise ``flatten_documents`` beyond its attempts (``tests/battery/``): what a
passing result shows, the stub, hints and solution."""

from __future__ import annotations

from lmlessons.exercises import EXERCISES, _check, check, hint, solution
from lmlessons.exercises.solutions_part2 import flatten_documents as reference


def test_the_solution_passes_and_names_transformers_collator() -> None:
    result = _check("flatten_documents", reference, watch=False)  # the course's own: unwatched
    assert result.passed, str(result)
    assert len(result.passed_checks) == 4
    assert "DataCollatorWithFlattening" in str(result)


def test_stub_hints_and_solution() -> None:
    def stub(docs, *, separator_id=-100):
        raise NotImplementedError("Your code here")

    result = check("flatten_documents", stub)
    assert result.status == "not_attempted"
    assert EXERCISES["flatten_documents"].signature in result.message
    for level in (1, 2, 3):
        assert str(hint("flatten_documents", level)).strip()
    assert "def flatten_documents(" in solution("flatten_documents").source
