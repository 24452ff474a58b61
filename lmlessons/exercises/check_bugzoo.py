"""Checker for lesson 08's bug zoo: ``check("bug_zoo", {"A": "pad_is_eos", ...})``, in the runner's
pattern (:mod:`._framework`).

The answer is a dict from case letters (:data:`lmlessons.bugzoo.cases.CASES`) to diagnosis ids
(:data:`~lmlessons.bugzoo.cases.DIAGNOSES`), or a function without arguments that returns one
(the lesson's exercise, called through the runner: a stub is "not attempted"); None leaves a
case unanswered, unknown letters or ids raise. A wrong diagnosis gets what that bug would look
like beside what the case really shows (its evidence, with the numbers of the recorded runs); a
partial answer says which cases are right so far. The cases come in groups
(:data:`~lmlessons.bugzoo.cases.GROUPS`: Part I, then after lessons 09 and 10, after lessons 11
and 12, and after lessons 14 and 15): a group is judged once one of its cases is answered, so a
learner who has done Part I passes with its cases and comes back for the others. The widget of
lesson 08 gives the same feedback (:func:`feedback`). The exercise is registered with
``answers=True`` (the learner passes answers, not a function to test), its own result class (no
hints: the evidence is the hint) and its own verdict when every case of the groups started is
right.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lmlessons.bugzoo.cases import (
    CASES,
    DIAGNOSES,
    GROUPS,
    Diagnosis,
    evidence,
    get_case,
    group_cases,
)
from lmlessons.exercises._framework import Case, Mistake, NotAttempted, Runner
from lmlessons.exercises._result import CheckResult

__all__ = ["SIGNATURE", "PASSED", "BugZooResult", "bug_zoo", "check_bug_zoo", "feedback"]

SIGNATURE = "my_diagnoses() -> {case letter: diagnosis id}   # or the dict itself"
PASSED = ("every case of the groups you started diagnosed", "")  # the verdict's title, message


@dataclass(frozen=True, repr=False)
class BugZooResult(CheckResult):
    """A :class:`CheckResult` whose footer points at the evidence (this exercise has no
    ``hint``: the symptoms are the hints)."""

    def _footer(self) -> str:
        if self.status == "failed":
            return "Pick a case in the widget above: its curves and numbers are the evidence."
        return ""


def bug_zoo() -> dict[str, str]:
    """The reference: the right diagnosis of every case."""
    return {case.id: case.diagnosis for case in CASES}


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


def _given(answers: object) -> dict[str, str]:
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
    if not given:
        raise NotAttempted(
            f'Give a diagnosis id for at least one case, e.g. `{{"{CASES[0].id}": "no_bug"}}`. '
            f"The ids: {', '.join(DIAGNOSES)}."
        )
    return given


def check_bug_zoo(run: Runner) -> None:
    """Every case answered and right; else the wrong ones with their evidence, or the missing."""
    answers = run.call(Case("your answers")) if callable(run.fn) else run.fn
    given = _given(answers)
    verdicts = {case_id: feedback(case_id, d) for case_id, d in given.items()}
    started = [
        c for g in GROUPS if any(c.id in given for c in group_cases(g)) for c in group_cases(g)
    ]
    right = [c.id for c in CASES if c.id in given and verdicts[c.id][0]]
    wrong = [c.id for c in CASES if c.id in given and not verdicts[c.id][0]]
    missing = [c.id for c in started if c.id not in given]
    for case in CASES:
        if case.id in right:
            run.ok(f"case {case.id}: {case.title}")
    parts = [verdicts[case_id][1] for case_id in wrong]
    parts.append(f"Right so far: {', '.join(right) or 'none'}.")
    if missing:
        parts.append(f"Not answered yet: {', '.join(missing)}.")
    later = [
        f"{GROUPS[g]}: {', '.join(c.id for c in group_cases(g))}"
        for g in GROUPS
        if not any(c in started for c in group_cases(g))
    ]
    if later:
        parts.append(f"Not started (for later): {'; '.join(later)}.")
    if wrong:
        head = f"{len(wrong)} of {len(given)} diagnoses wrong: case {', '.join(wrong)}."
        raise Mistake("wrong_diagnosis", "\n\n".join([head, *parts]))
    if missing:
        head = f"{len(right)} of {len(started)} cases diagnosed, all right so far."
        raise Mistake("incomplete", "\n\n".join([head, *parts]))
