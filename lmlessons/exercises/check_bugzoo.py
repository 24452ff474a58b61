"""Checker for lesson 08's bug zoo: ``check("bug_zoo", {"A": "pad_is_eos", ...})``.

The answer is a dict (or a function without arguments returning one) from case letters
(:data:`lmlessons.course.bugzoo.cases.CASES`) to diagnosis ids
(:data:`~lmlessons.course.bugzoo.cases.DIAGNOSES`); ``None`` leaves a case unanswered. A wrong
diagnosis gets what that bug would look like beside what the case really shows (its evidence,
with the numbers of the recorded runs); a partial answer says which cases are right so far. The
widget of lesson 08 gives the same feedback (:func:`feedback`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lmlessons.course.bugzoo.cases import CASES, DIAGNOSES, Diagnosis, evidence, get_case
from lmlessons.exercises._result import CheckResult

__all__ = ["EXERCISE", "BugZooResult", "get_diagnosis", "feedback", "check_bug_zoo"]

EXERCISE = "bug_zoo"


@dataclass(frozen=True, repr=False)
class BugZooResult(CheckResult):
    """A :class:`CheckResult` whose footer points at the evidence (this exercise has no
    ``hint``: the symptoms are the hints)."""

    def _footer(self) -> str:
        if self.status == "failed":
            return "Pick a case in the widget above: its curves and numbers are the evidence."
        return ""


def get_diagnosis(diagnosis_id: object) -> Diagnosis:
    """The diagnosis with id ``diagnosis_id``, or a ValueError naming the ids."""
    if not isinstance(diagnosis_id, str) or diagnosis_id not in DIAGNOSES:
        raise ValueError(
            f"unknown diagnosis {diagnosis_id!r}; the diagnoses are: {', '.join(DIAGNOSES)}"
        )
    return DIAGNOSES[diagnosis_id]


def feedback(
    case_id: str, diagnosis_id: str, records: Mapping[str, Any] | None = None
) -> tuple[bool, str]:
    """``(right, text)`` for diagnosing case ``case_id`` as ``diagnosis_id``: the text names
    the evidence (with the recorded numbers) and, if wrong, what the chosen bug would show."""
    case, chosen = get_case(case_id), get_diagnosis(diagnosis_id)
    shown = evidence(case, records)
    if chosen.id == case.diagnosis:
        return True, f"Case {case.id}: right, {chosen.label}. {shown}"
    return False, (
        f"Case {case.id}: not this one. If {chosen.label}, you would see {chosen.would_show}. "
        f"What case {case.id} shows: {shown}"
    )


def _answers(answers: object) -> dict[str, str]:
    """The answered cases of ``answers``, checked (unknown letters or ids raise)."""
    if not isinstance(answers, Mapping):
        raise TypeError(
            "answers must be a dict {case letter: diagnosis id}, e.g. "
            f'{{"A": "no_bug"}}; got {type(answers).__name__}'
        )
    given = {}
    for case_id, diagnosis_id in answers.items():
        get_case(case_id)
        if diagnosis_id is not None:
            given[case_id] = get_diagnosis(diagnosis_id).id
    return given


def _not_attempted() -> CheckResult:
    return BugZooResult(
        EXERCISE,
        "not_attempted",
        "not attempted yet",
        "Give a diagnosis id for at least one case, e.g. "
        f'`{{"{CASES[0].id}": "no_bug"}}`. The ids: {", ".join(DIAGNOSES)}.',
    )


def check_bug_zoo(answers: object, records: Mapping[str, Any] | None = None) -> CheckResult:
    """Check ``{case letter: diagnosis id}`` against the cases (see the module docstring).
    ``answers`` may also be a function without arguments that returns the dict (the lesson's
    exercise): one that raises ``NotImplementedError`` or returns None is "not attempted"."""
    if callable(answers):
        try:
            answers = answers()
        except NotImplementedError:
            return _not_attempted()
    if answers is None:
        return _not_attempted()
    given = _answers(answers)
    if not given:
        return _not_attempted()
    verdicts = {case_id: feedback(case_id, d, records) for case_id, d in given.items()}
    right = [c.id for c in CASES if c.id in given and verdicts[c.id][0]]
    wrong = [c.id for c in CASES if c.id in given and not verdicts[c.id][0]]
    missing = [c.id for c in CASES if c.id not in given]
    if not wrong and not missing:
        checks = tuple(f"case {c.id}: {c.title}" for c in CASES)
        return BugZooResult(
            EXERCISE, "passed", f"all {len(CASES)} cases diagnosed", "", passed_checks=checks
        )
    parts = [verdicts[case_id][1] for case_id in wrong]
    parts.append(f"Right so far: {', '.join(right) or 'none'}.")
    if missing:
        parts.append(f"Not answered yet: {', '.join(missing)}.")
    if wrong:
        title = f"{len(wrong)} of {len(given)} diagnoses wrong: case {', '.join(wrong)}"
        mistake = "wrong_diagnosis"
    else:
        title = f"{len(right)} of {len(CASES)} cases diagnosed, all right so far"
        mistake = "incomplete"
    return BugZooResult(EXERCISE, "failed", title, "\n\n".join(parts), mistake=mistake)
