"""Lesson 09's exercise ``flatten_documents``: the checker accepts the reference, transformers'
collator and another correct version, and names the defect of every naive version
(``tests/naive_flatten.py``)."""

from __future__ import annotations

import naive_flatten as nf
import pytest

from lmlessons.exercises import EXERCISES, check, hint, solution
from lmlessons.exercises.solutions_part2 import flatten_documents as reference

NAIVE = list(nf.EXPECTED["flatten_documents"].items())


@pytest.mark.parametrize(
    "fn",
    [reference, nf.hf_flatten_documents, *(getattr(nf, v) for v in nf.VALID["flatten_documents"])],
    ids=["solution", "transformers", *nf.VALID["flatten_documents"]],
)
def test_correct_functions_pass(fn) -> None:
    result = check("flatten_documents", fn)
    assert result.passed, str(result)
    assert len(result.passed_checks) == 4
    assert "DataCollatorWithFlattening" in str(result)


@pytest.mark.parametrize(("variant", "code"), NAIVE, ids=[v for v, _ in NAIVE])
def test_naive_variant_is_rejected_with_its_defect(variant: str, code: str) -> None:
    result = check("flatten_documents", getattr(nf, variant))
    assert result.status == "failed" and result.mistake == code, str(result)
    if code in nf.PHRASES:
        assert nf.PHRASES[code] in f"{result.title}\n{result.message}", str(result)
    assert str(check("flatten_documents", getattr(nf, variant))) == str(result)  # deterministic


def test_stub_hints_and_solution() -> None:
    def stub(docs, *, separator_id=-100):
        raise NotImplementedError("Your code here")

    result = check("flatten_documents", stub)
    assert result.status == "not_attempted"
    assert EXERCISES["flatten_documents"].signature in result.message
    for level in (1, 2, 3):
        assert str(hint("flatten_documents", level)).strip()
    assert "def flatten_documents(" in solution("flatten_documents").source
