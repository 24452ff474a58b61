"""The corpus of learners' attempts at the checked exercises (``tests/battery/``), run through
``check``.

Every module ``tests/battery/<exercise>.py`` holds attempts marked ``@wrong(code)``,
``@wrong(says=...)`` or ``@correct`` (``battery/_attempt.py``). A correct attempt must pass; a
wrong one must fail, be named by its mistake code and/or carry its words, and point to the first
hint. The attempts were written from what a learner sees (the lessons, the exercises README, the
package functions), not from the checkers.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest
from battery._attempt import ATTEMPTS, CORRECT, Attempt

from lmlessons.course.content import load
from lmlessons.exercises import EXERCISES, check

BATTERY = Path(__file__).parent / "battery"
for _module in pkgutil.iter_modules([str(BATTERY)]):
    if not _module.name.startswith("_"):
        importlib.import_module(f"battery.{_module.name}")

CASES = [
    pytest.param(exercise, attempt, id=f"{exercise}-{attempt.id}")
    for exercise, attempts in sorted(ATTEMPTS.items())
    for attempt in attempts
]


def test_every_exercise_has_a_battery_of_documented_attempts():
    """Each checked exercise has at least 12 wrong and 3 correct attempts, each with a docstring,
    each expected code is in the mistake catalogue, and no two attempts share an id."""
    codes = set(load("mistakes"))
    assert set(ATTEMPTS) == set(EXERCISES) - {"bug_zoo"}, set(ATTEMPTS) ^ set(EXERCISES)
    for exercise, attempts in ATTEMPTS.items():
        wrong = [a for a in attempts if a.expect != CORRECT]
        assert len(wrong) >= 12 and len(attempts) - len(wrong) >= 3, exercise
        assert len({a.id for a in attempts}) == len(attempts), exercise
        for a in attempts:
            assert a.does.strip(), f"{exercise}.{a.id} has no docstring"
            assert a.expect in codes | {CORRECT, None}, f"{exercise}.{a.id}: {a.expect}"
            assert a.says is None or a.says.lower() != "expected", f"{exercise}.{a.id}"


@pytest.mark.parametrize(("exercise", "attempt"), CASES)
def test_attempt(exercise: str, attempt: Attempt) -> None:
    result = check(exercise, attempt.fn)
    seen = f"{attempt.does}\n-> [{result.mistake}] {result.title}: {result.message}"
    if attempt.expect == CORRECT:
        assert result.passed, seen
        return
    assert result.status == "failed", f"slipped through: {seen}"
    if attempt.expect is not None:
        assert result.mistake == attempt.expect, f"expected {attempt.expect}, got {seen}"
    if attempt.says is not None:
        assert attempt.says in f"{result.title}\n{result.message}", f"no {attempt.says!r}: {seen}"
    assert f'hint("{exercise}", 1)' in str(result), seen
