"""An independent battery of learners' attempts for the checked exercises.

Every module ``tests/battery/<exercise>.py`` holds ``EXERCISE``, ``WRONG`` and ``CORRECT``
(lists of :class:`battery._attempt.Attempt`). A wrong attempt must fail ``check`` and be named by
the mistake code it expects (or, with ``expect=None``, fail with a message that says what was
expected); a correct one must pass. The attempts were written from what a learner sees (the
lessons, the exercises README, the package functions), not from the checkers.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

from lmlessons.exercises import check

BATTERY = Path(__file__).parent / "battery"


def _modules() -> list:
    names = sorted(
        m.name for m in pkgutil.iter_modules([str(BATTERY)]) if not m.name.startswith("_")
    )
    return [importlib.import_module(f"battery.{name}") for name in names]


def _cases() -> list:
    cases = []
    for module in _modules():
        for kind in ("wrong", "correct"):
            attempts = getattr(module, kind.upper())
            for i, attempt in enumerate(attempts, 1):
                slug = attempt.fn.__name__.strip("_")
                case_id = f"{module.EXERCISE}-{kind}-{i:02d}-{slug}"
                cases.append(pytest.param(module.EXERCISE, kind, attempt, id=case_id))
    return cases


def test_battery_modules_are_complete():
    """Each exercise module has at least 12 wrong and 3 correct attempts, each with a `does`."""
    modules = _modules()
    assert modules, "no battery module found"
    for module in modules:
        assert isinstance(module.EXERCISE, str) and module.EXERCISE
        assert len(module.WRONG) >= 12, module.EXERCISE
        assert len(module.CORRECT) >= 3, module.EXERCISE
        assert all(a.does.strip() for a in module.WRONG + module.CORRECT), module.EXERCISE


@pytest.mark.parametrize(("exercise", "kind", "attempt"), _cases())
def test_attempt(exercise, kind, attempt):
    result = check(exercise, attempt.fn)
    if kind == "correct":
        assert result.passed, (
            f"{attempt.does}\n-> [{result.mistake}] {result.title}: {result.message}"
        )
        return
    assert not result.passed, f"slipped through: {attempt.does}"
    if attempt.expect is None:
        assert "expected" in result.message.lower(), (
            f"{attempt.does}\n-> [{result.mistake}] {result.title}: {result.message}"
        )
    else:
        assert result.mistake == attempt.expect, (
            f"{attempt.does}\nexpected {attempt.expect}, got [{result.mistake}] {result.title}: "
            f"{result.message}"
        )
