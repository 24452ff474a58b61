"""The claims ledger, ``docs/claims.md``: well formed, evidenced, and covering the lessons.

The behaviour test of a bare ``test`` claim is named ``test_claim_<id>`` and lives in
``tests/test_claims_NN.py``; a ``test tests/x.py::name ...`` claim names tests that exist elsewhere.
"""

from __future__ import annotations

import ast
import functools
from collections import Counter
from pathlib import Path

import pytest

from tests._claims import (
    CITE,
    PAPER,
    TESTS,
    Claim,
    fold,
    lesson_text,
    named_test_problem,
    read_ledger,
    uncovered,
)
from tests._lessons import LESSONS, cells

HERE = Path(__file__).parent
CLAIMS = read_ledger()


@functools.cache
def _claim_tests() -> frozenset[str]:
    names = set()
    for module in HERE.glob("test_claims*.py"):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        names |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    return frozenset(names)


def test_the_ledger_has_unique_ids() -> None:
    counts = Counter(c.id for c in CLAIMS)
    assert not [i for i, n in counts.items() if n > 1]
    assert CLAIMS, "the ledger is empty"


# One test over the whole ledger, naming each claim that fails: a test per claim cost more in
# pytest's own bookkeeping than the checks themselves (about 450 claims).
def test_every_anchor_is_in_its_lesson() -> None:
    missing = [c.id for c in CLAIMS if fold(c.anchor) not in lesson_text(c.lesson)]
    assert not missing, f"anchors not found in their lessons: {missing}"


def _evidence_problem(claim: Claim) -> str | None:
    if claim.evidence == "test":
        if claim.test_name not in _claim_tests():
            return f"no {claim.test_name} in tests/test_claims*.py"
    elif claim.evidence.startswith("test"):
        if not (TESTS.match(claim.evidence) and claim.tests):
            return f"malformed: {claim.evidence}"
        problems = [p for p in (named_test_problem(path, n) for path, n in claim.tests) if p]
        return "; ".join(problems) or None
    elif not (CITE.match(claim.evidence) or PAPER.match(claim.evidence)):
        return f"neither a citation nor a paper: {claim.evidence}"
    return None


def test_every_claim_has_evidence() -> None:
    problems = {c.id: p for c in CLAIMS if (p := _evidence_problem(c))}
    assert not problems, problems


def test_a_named_test_must_exist_and_run(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_x.py").write_text(
        "import pytest\n\ndef test_runs(): pass\n\n@pytest.mark.skip\ndef test_off(): pass\n"
        "\ndef test_leaves():\n    pytest.skip('no')\n\n"
        "@pytest.mark.skipif(True, reason='never')\ndef test_never(): pass\n"
    )
    path = "tests/test_x.py"
    assert named_test_problem(path, "test_runs", root=tmp_path) is None
    for name in ("test_off", "test_leaves", "test_never"):
        assert "always skipped" in str(named_test_problem(path, name, root=tmp_path)), name
    assert "no function" in str(named_test_problem(path, "test_gone", root=tmp_path))
    assert "no file" in str(named_test_problem("tests/test_y.py", "test_runs", root=tmp_path))


def test_every_claim_test_belongs_to_a_claim() -> None:
    named = {c.test_name for c in CLAIMS if c.evidence == "test"}
    named |= {name for c in CLAIMS for _, name in c.tests}
    orphans = {n for n in _claim_tests() if n.startswith("test_claim_")} - named
    assert not orphans, f"claim tests with no ledger entry: {sorted(orphans)}"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_paragraph_naming_another_system_is_in_the_ledger(path: Path) -> None:
    missing = uncovered(path, CLAIMS)
    assert not missing, "no ledger anchor in:\n" + "\n".join(f"- {p[:160]}" for p in missing)


def test_lesson_00_points_to_the_ledger_once() -> None:
    (start,) = [p for p in LESSONS if p.name.startswith("00_")]
    text = " ".join("".join(c["source"]) for c in cells(start))
    assert text.count("docs/claims.md") == 1
    others = [p for p in LESSONS if not p.name.startswith("00_")]
    assert not [p.name for p in others if "docs/claims.md" in p.read_text(encoding="utf-8")]
